#!/usr/bin/env bash
# Install the OpenCode CLI at a pinned version into .tools/opencode-VERSION/ (from the npm
# registry, once: a version already there is left alone) and print the absolute path of its
# native binary, which runs without node.js (the platform sub-package opencode-linux-*
# carries it under bin/opencode). Installs Debian's npm when npm is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

version=1.18.33
dir=$PWD/.tools/opencode-$version

find_binary() {  # the platform package's binary that runs here: the baseline one (no AVX2) last
    local bin
    for bin in "$dir"/node_modules/opencode-linux-*/bin/opencode; do
        case $bin in *-baseline*) continue ;; esac
        [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1 && { echo "$bin"; return 0; }
    done
    for bin in "$dir"/node_modules/opencode-linux-*-baseline*/bin/opencode; do
        [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1 && { echo "$bin"; return 0; }
    done
    return 1
}

if ! binary=$(find_binary); then
    if ! command -v npm >/dev/null; then
        if [ "$(id -u)" != 0 ]; then
            echo "opencode: npm is missing and installing it needs root" >&2
            exit 1
        fi
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    fi
    staging=$dir.partial.$$
    rm -rf "$staging"
    trap 'rm -rf "$staging"' EXIT
    mkdir -p "$staging"
    # No scripts: opencode-ai's postinstall only copies the platform package's binary, which
    # is used where it lies.
    npm install --prefix "$staging" --no-audit --no-fund --loglevel=error --silent --ignore-scripts \
        "opencode-ai@$version" >/dev/null
    rm -rf "$dir"
    mv "$staging" "$dir"
    trap - EXIT
    binary=$(find_binary) || {
        echo "opencode: no native binary that runs on $(uname -m) in $dir" >&2
        exit 1
    }
fi
# Linked where nodeprov looks after PATH (nodeprov/agents/_installed.py): found with nothing exported.
bin_dir=${XDG_DATA_HOME:-$HOME/.local/share}/nodeprov/bin
case $bin_dir in /*) ;; *) bin_dir=$HOME/.local/share/nodeprov/bin ;; esac
mkdir -p "$bin_dir"
ln -sfn "$binary" "$bin_dir/opencode"
echo "$binary"
