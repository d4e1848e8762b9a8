#!/usr/bin/env bash
# Build the tests' node base image offline: debootstrap a minimal Debian from the mirror this
# machine's apt already uses, then `docker import` it. No registry is needed.
#
# The tag is a hash of this script, so an unchanged recipe is built once per Docker engine;
# the root-filesystem tarball is cached too (NODEPROV_CACHE, default ~/.cache/nodeprov), so a
# fresh engine on the same machine imports it in seconds.
#
# Prints the image tag on stdout.
set -euo pipefail
suite=bookworm
packages=procps
recipe_hash=$(sha256sum "$0" | cut -c1-12)
tag="nodeprov-test-base:$recipe_hash"
cache="${NODEPROV_CACHE:-$HOME/.cache/nodeprov}"
tarball="$cache/rootfs-$suite-$recipe_hash.tar"

if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag"
    exit 0
fi

if [ ! -s "$tarball" ]; then
    mirror=$( (cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true) | awk '$1 == "URIs:" {print $2; exit}')
    if [ -z "$mirror" ]; then
        mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    fi
    [ -n "$mirror" ] || { echo "no Debian mirror found in this machine's apt sources" >&2; exit 1; }
    command -v debootstrap >/dev/null || { echo "debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
    root=$(mktemp -d)
    trap 'rm -rf "$root"' EXIT
    echo "debootstrapping $suite (minbase + $packages)..." >&2
    debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >&2
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    mkdir -p "$cache"
    tar -C "$root" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
fi

docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LANG=C.UTF-8' \
    -c 'CMD ["sleep", "infinity"]' \
    "$tarball" "$tag" >&2
echo "$tag"
