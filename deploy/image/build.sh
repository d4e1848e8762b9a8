#!/usr/bin/env bash
# Build the image of `nodeprov serve` (deploy/image/Dockerfile) with no network in the build:
#   - the Debian packages it needs (python3, python3-venv, tini, ca-certificates) are
#     downloaded first by this machine's apt-get, from its own mirror, against the base
#     image's package list (its dpkg status), and installed by dpkg in the build;
#   - the project's wheels (nodeprov, nodeprov-kubernetes) are built from this repository
#     with pip, and its dependencies' wheels downloaded by pip (this machine's index
#     configuration) for the image's Python (CPython 3.11 on glibc, this machine's
#     architecture), at the versions of constraints.txt.
# Nothing is pulled: the base image must already be in the Docker engine and be Debian
# bookworm, like this machine (`docker pull debian:bookworm-slim` once, or debootstrap one
# offline as integration/images/build-base.sh does).
#
# The tag is a hash of what goes in (this script, the Dockerfile, the base image's id and
# the project's sources), so an unchanged project is built once per engine; a new build
# untags the earlier ones of the same name. Prints the image's tag on stdout; progress goes
# to stderr.
#
# Environment: BASE_IMAGE (default debian:bookworm-slim), IMAGE (the repository part of
# the tag, default nodeprov-serve), PYTHON (the Python whose pip builds and downloads the
# wheels, default python3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
base=${BASE_IMAGE:-debian:bookworm-slim}
name=${IMAGE:-nodeprov-serve}
python=${PYTHON:-python3}
packages=(python3 python3-venv tini ca-certificates)
python_version=3.11
arch=$(uname -m)

say() { echo "build.sh: $*" >&2; }

base_id=$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null) || {
    say "the base image $base is not in the Docker engine (nothing is pulled): docker pull it, or set BASE_IMAGE"
    exit 1
}

# What goes in: the recipe, the base, and the project's sources (as the wheels are built from them).
sources() {
    cd "$repo"
    printf '%s\n' pyproject.toml constraints.txt README.md
    find nodeprov providers/kubernetes -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path '*.egg-info/*'
}
digest=$(
    {
        printf '%s\0%s\0%s\0' "$base_id" "${packages[*]}" "$python_version-$arch"
        cat "$here/build.sh" "$here/Dockerfile"  # their contents, wherever they are called from
        sources | LC_ALL=C sort | (cd "$repo" && xargs -d '\n' sha256sum)
    } | sha256sum | cut -c1-12
)
tag="$name:$digest"
if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag"
    exit 0
fi

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/debs/partial" "$context/wheels"
cp "$here/Dockerfile" "$context/"

say "downloading ${packages[*]} for $base"
docker run --rm --network none --entrypoint cat "$base" /var/lib/dpkg/status >"$context/status"
DEBIAN_FRONTEND=noninteractive apt-get --download-only --yes --quiet --no-install-recommends \
    -o "Dir::State::status=$context/status" -o "Dir::Cache::archives=$context/debs" \
    -o Debug::NoLocking=true install "${packages[@]}" >&2 || {
    say "apt-get could not download ${packages[*]} (are this machine's package lists current? apt-get update)"
    exit 1
}
rm -rf "$context/debs/partial" "$context/debs/lock" "$context/status"
ls "$context"/debs/*.deb >/dev/null 2>&1 || { say "apt-get downloaded nothing"; exit 1; }

say "building the project's wheels"
"$python" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$context/wheels" \
    "$repo" "$repo/providers/kubernetes" >&2
# The dependencies, for the image's Python whatever this machine's: binary wheels only.
platforms=(--platform any --platform "manylinux1_$arch" --platform "manylinux2010_$arch" --platform "manylinux2014_$arch")
for minor in $(seq 17 36); do  # bookworm's glibc is 2.36
    platforms+=(--platform "manylinux_2_${minor}_$arch")
done
nodeprov_wheel=$(ls "$context"/wheels/nodeprov-[0-9]*.whl)
provider_wheel=$(ls "$context"/wheels/nodeprov_kubernetes-*.whl)
say "downloading the dependencies' wheels"
"$python" -m pip download --quiet --disable-pip-version-check --dest "$context/wheels" \
    --only-binary=:all: --implementation cp --python-version "$python_version" \
    --abi "cp${python_version/./}" --abi abi3 --abi none "${platforms[@]}" \
    --constraint "$repo/constraints.txt" --find-links "$context/wheels" \
    "$nodeprov_wheel[serve,postgres]" "$provider_wheel" >&2

say "building $tag from $base (no network)"
docker build --network none --build-arg "BASE_IMAGE=$base" --label nodeprov.build=deploy/image \
    --tag "$tag" --quiet "$context" >&2
# Earlier builds of this name are superseded: untagged (an image tagged otherwise too, or in
# use by a container, stays).
docker images --filter label=nodeprov.build=deploy/image --filter "reference=$name" \
    --format '{{.Repository}}:{{.Tag}}' | grep -vxF "$tag" | xargs -r docker rmi >/dev/null 2>&1 || true
say "built $tag in ${SECONDS}s"
echo "$tag"
