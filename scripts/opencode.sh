#!/usr/bin/env bash
# Install the OpenCode CLI at a pinned version into .tools/opencode-VERSION/ (from the npm
# registry, once: a version already there is left alone) and print the absolute path of its
# native binary, which runs without node.js (the platform sub-package opencode-linux-*
# carries it under bin/opencode). Installs Debian's npm when npm is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_npm_tool.sh
. scripts/_npm_tool.sh

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
    # No scripts: opencode-ai's postinstall only copies the platform package's binary, which
    # is used where it lies.
    npm_install opencode "$dir" "opencode-ai@$version" --ignore-scripts
    binary=$(find_binary) || {
        echo "opencode: no native binary that runs on $(uname -m) in $dir" >&2
        exit 1
    }
fi
link_for_nodeprov opencode "$binary"
echo "$binary"
