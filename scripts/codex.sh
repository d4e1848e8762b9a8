#!/usr/bin/env bash
# Install the OpenAI Codex CLI at a pinned version into .tools/codex-VERSION/ (from the npm
# registry, once: a version already there is left alone) and print the absolute path of its
# native binary, which runs without node.js (the platform sub-package @openai/codex-linux-*
# carries it under vendor/TRIPLE/bin/codex). Installs Debian's npm when npm is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_npm_tool.sh
. scripts/_npm_tool.sh

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
    npm_install codex "$dir" "@openai/codex@$version"
    binary=$(find_binary) || {
        echo "codex: no native binary for $(uname -m) in $dir" >&2
        exit 1
    }
fi
"$binary" --version >/dev/null 2>&1 || { echo "codex: $binary does not run" >&2; exit 1; }
link_for_nodeprov codex "$binary"
echo "$binary"
