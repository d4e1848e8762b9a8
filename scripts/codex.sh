#!/usr/bin/env bash
# Install the OpenAI Codex CLI at a pinned version into .tools/codex-VERSION/ (from the npm
# registry, once: a version already there is left alone) and print the absolute path of its
# native binary, which runs without node.js (the platform sub-package @openai/codex-linux-*
# carries it under vendor/TRIPLE/bin/codex). Installs Debian's npm when npm is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.169.0
dir=$PWD/.tools/codex-$version

find_binary() {  # the native binary the platform package carries, if installed
    local manifest
    for manifest in "$dir"/node_modules/@openai/codex-*/vendor/*/codex-package.json; do
        [ -f "$manifest" ] || continue
        local bin=${manifest%/codex-package.json}/bin/codex
        [ -x "$bin" ] && { echo "$bin"; return 0; }
    done
    for bin in "$dir"/node_modules/@openai/codex-*/vendor/*/bin/codex \
        "$dir"/node_modules/@openai/codex-*/vendor/*/codex/codex; do
        [ -x "$bin" ] && { echo "$bin"; return 0; }
    done
    return 1
}

if ! binary=$(find_binary); then
    if ! command -v npm >/dev/null; then
        if [ "$(id -u)" != 0 ]; then
            echo "codex: npm is missing and installing it needs root" >&2
            exit 1
        fi
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    fi
    staging=$dir.partial.$$
    rm -rf "$staging"
    trap 'rm -rf "$staging"' EXIT
    mkdir -p "$staging"
    npm install --prefix "$staging" --no-audit --no-fund --loglevel=error --silent \
        "@openai/codex@$version" >/dev/null
    rm -rf "$dir"
    mv "$staging" "$dir"
    trap - EXIT
    binary=$(find_binary) || {
        echo "codex: no native binary for $(uname -m) in $dir" >&2
        exit 1
    }
fi
"$binary" --version >/dev/null 2>&1 || { echo "codex: $binary does not run" >&2; exit 1; }
# Linked where nodeprov looks after PATH (nodeprov/agents/_installed.py): found with nothing exported.
bin_dir=${XDG_DATA_HOME:-$HOME/.local/share}/nodeprov/bin
case $bin_dir in /*) ;; *) bin_dir=$HOME/.local/share/nodeprov/bin ;; esac
mkdir -p "$bin_dir"
ln -sfn "$binary" "$bin_dir/codex"
echo "$binary"
