#!/usr/bin/env bash
# Install Qwen Code at a pinned version into .tools/qwen-VERSION/ (from the npm registry, once:
# a version already there is left alone) and print the absolute path of its launcher, the
# node.js script cli-entry.js (a `#!/usr/bin/env node` shebang: it needs node.js on PATH; the
# package asks for 22 or later, and its ACP handshake answers on Debian's 20 as well).
# Installs Debian's npm when npm is missing.
#
# It is not linked under $XDG_DATA_HOME/nodeprov/bin as the codex, opencode and gemini CLIs
# are: no agent of nodeprov's looks for it there. It runs as the `acp` agent, whose command
# names it (the node's `tools`, or `cli_path`, give its path); integration/test_acp_handshakes.py
# checks its ACP handshake.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_npm_tool.sh
. scripts/_npm_tool.sh

version=0.24.4
dir=$PWD/.tools/qwen-$version

find_launcher() {  # the package's launcher, if installed
    local launcher=$dir/node_modules/@qwen-code/qwen-code/cli-entry.js
    [ -x "$launcher" ] && { echo "$launcher"; return 0; }
    return 1
}

if ! launcher=$(find_launcher); then
    # No scripts: the CLI itself has none; its optional native modules (sharp, node-pty, the
    # clipboard's) take their platform packages, which carry their binaries prebuilt.
    npm_install qwen "$dir" "@qwen-code/qwen-code@$version" --ignore-scripts
    launcher=$(find_launcher) || {
        echo "qwen: no launcher cli-entry.js in $dir" >&2
        exit 1
    }
fi
# Checked in a home of its own: any run writes its settings under $HOME/.qwen.
check_home=$(mktemp -d)
trap 'rm -rf "$check_home"' EXIT
HOME=$check_home QWEN_USAGE_STATISTICS_ENABLED=false "$launcher" --version >/dev/null 2>&1 || {
    echo "qwen: $launcher does not run (it needs node.js on PATH)" >&2
    exit 1
}
rm -rf "$check_home"
trap - EXIT
echo "$launcher"
