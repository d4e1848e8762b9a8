#!/usr/bin/env bash
# Build a single-node Kubernetes for the tests, offline, once per version, and install what it
# runs on (Debian's etcd-server, containerd and runc).
#
# No Kubernetes server binary is in Debian's binary packages or any registry this machine
# reaches, but Debian bookworm's `kubernetes` source package (1.20.2, its Go dependencies
# vendored) builds with Debian's golang-go: kube-apiserver, kubelet, kube-scheduler,
# kube-controller-manager and kubectl (about 10 minutes on two cores). The pause image is
# compiled from the same tree (build/pause/linux/pause.c, static) and saved as an image archive
# for `ctr images import`.
#
# The result is cached in $NODEPROV_CACHE/kubernetes-VERSION (default ~/.cache/nodeprov), so a
# kept machine skips the build; a partial build never looks finished (a stamp is written last).
# Prints the cache directory on stdout.
#
# With --background, a missing build starts in the background (niced, logging to
# kubernetes-VERSION.log beside the cache) and this returns at once: `make test` builds beside
# the test suite, whose Kubernetes tests run last and call this script without it, which waits
# for that build (one build at a time, under a lock) and then finds it cached.
set -euo pipefail
version=1.20.2
source_package=kubernetes
cache_root="${NODEPROV_CACHE:-$HOME/.cache/nodeprov}"
cache="$cache_root/kubernetes-$version"
binaries=(kube-apiserver kubelet kube-scheduler kube-controller-manager kubectl)

if [ "${1:-}" = --background ]; then
    if [ ! -f "$cache/built" ]; then
        mkdir -p "$cache_root"
        echo "kubernetes: building $version in the background (log: $cache_root/kubernetes-$version.log)" >&2
        nohup setsid "$0" </dev/null >"$cache_root/kubernetes-$version.log" 2>&1 &
    fi
    exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/kubernetes-$version.lock"
flock 9

apt_updated=""
install() {  # install missing Debian packages, updating the index once
    local missing=()
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
    done
    [ ${#missing[@]} = 0 ] && return 0
    [ "$(id -u)" = 0 ] || { echo "kubernetes: need root to install ${missing[*]}" >&2; exit 1; }
    [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install etcd-server containerd runc
systemctl disable --now etcd containerd >/dev/null 2>&1 || true  # the tests start their own

if [ -f "$cache/built" ]; then
    echo "$cache"
    exit 0
fi

install golang-go rsync dpkg-dev gcc libc6-dev
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# A private sources list with only a deb-src line: the machine's own apt configuration is left alone.
mirror=$( (cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true) | awk '$1 == "URIs:" {print $2; exit}')
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || { echo "kubernetes: no Debian mirror found in this machine's apt sources" >&2; exit 1; }
mkdir -p "$work/lists/partial"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm main" >"$work/sources.list"
apt_private=(-o APT::Sandbox::User=root -o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$work/lists")
apt-get "${apt_private[@]}" update -qq
(cd "$work" && apt-get "${apt_private[@]}" source --download-only -qq "$source_package" >/dev/null)
(cd "$work" && dpkg-source --no-check -x ./*.dsc tree >/dev/null)  # applies debian/patches

echo "kubernetes: building $version from Debian's source package (about 10 minutes)..." >&2
(
    cd "$work/tree"
    export GOCACHE="$work/gocache" GOPATH="$work/gopath" GOFLAGS=-mod=vendor
    KUBE_GIT_VERSION="v$version" KUBE_GIT_TREE_STATE=clean CGO_ENABLED=0 \
        nice -n 19 make WHAT="$(printf 'cmd/%s ' "${binaries[@]}")" >"$work/build.log" 2>&1 ||
        { tail -40 "$work/build.log" >&2; exit 1; }
)

# The pause image: one static binary as the image's entrypoint, in `docker save` format.
image="$work/image"
mkdir -p "$image/rootfs"
gcc -Os -static -DVERSION="v3.2-nodeprov" -o "$image/rootfs/pause" "$work/tree/build/pause/linux/pause.c"
tar -C "$image/rootfs" -cf "$image/layer.tar" pause
layer_digest=$(sha256sum "$image/layer.tar" | cut -d' ' -f1)
cat >"$image/config.json" <<EOF
{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:$layer_digest"]},"history":[{"created_by":"nodeprov scripts/kubernetes.sh"}]}
EOF
config_digest=$(sha256sum "$image/config.json" | cut -d' ' -f1)
mv "$image/config.json" "$image/$config_digest.json"
mkdir "$image/$layer_digest" && mv "$image/layer.tar" "$image/$layer_digest/layer.tar"
cat >"$image/manifest.json" <<EOF
[{"Config":"$config_digest.json","RepoTags":["k8s.gcr.io/pause:3.2"],"Layers":["$layer_digest/layer.tar"]}]
EOF

rm -rf "$cache" && mkdir -p "$cache/bin"
for binary in "${binaries[@]}"; do
    cp "$work/tree/_output/local/bin/linux/amd64/$binary" "$cache/bin/"
done
tar -C "$image" -cf "$cache/pause.tar" manifest.json "$config_digest.json" "$layer_digest"
touch "$cache/built"
echo "$cache"
