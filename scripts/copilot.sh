#!/usr/bin/env bash
# Install the GitHub Copilot CLI at a pinned version into .tools/copilot-VERSION/ (from the npm
# registry, once: a version already there is left alone) and print the absolute path of its
# native binary, which runs without node.js (the platform sub-package @github/copilot-linux-*
# carries it as `copilot`). Installs Debian's npm when npm is missing.
#
# It is not linked under $XDG_DATA_HOME/nodeprov/bin as the codex, opencode and gemini CLIs
# are: no agent of nodeprov's looks for it there. It runs as the `acp` agent, whose command
# names it (the node's `tools`, or `cli_path`, give its path); integration/test_acp_handshakes.py
# checks its ACP handshake. Its model cannot be faked here: it needs a live key.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_npm_tool.sh
. scripts/_npm_tool.sh

version=1.0.102
dir=$PWD/.tools/copilot-$version

find_binary() {  # the platform package's binary, if installed
    local bin
    for bin in "$dir"/node_modules/@github/copilot-linux-*/copilot \
        "$dir"/node_modules/@github/copilot-linuxmusl-*/copilot; do
        [ -x "$bin" ] && { echo "$bin"; return 0; }
    done
    return 1
}

if ! binary=$(find_binary); then
    # No scripts: neither package has any; npm picks the platform package (os, cpu, libc).
    npm_install copilot "$dir" "@github/copilot@$version" --ignore-scripts
    binary=$(find_binary) || {
        echo "copilot: no native binary for $(uname -m) in $dir" >&2
        exit 1
    }
fi
# Checked in a home of its own: any run unpacks its package (235 MB) under
# $XDG_CACHE_HOME/copilot/pkg, and the update check is off (it asks api.github.com otherwise).
check_home=$(mktemp -d)
trap 'rm -rf "$check_home"' EXIT
HOME=$check_home XDG_CACHE_HOME=$check_home/.cache COPILOT_AUTO_UPDATE=false \
    "$binary" --version >/dev/null 2>&1 || {
    echo "copilot: $binary does not run" >&2
    exit 1
}
rm -rf "$check_home"
trap - EXIT
echo "$binary"
