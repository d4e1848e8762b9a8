#!/usr/bin/env bash
# Install the Gemini CLI at a pinned version into .tools/gemini-VERSION/ (from the npm
# registry, once: a version already there is left alone) and print the absolute path of its
# launcher, the node.js script bundle/gemini.js (a `#!/usr/bin/env node` shebang: it needs
# node.js 20 or later on PATH). Installs Debian's npm when npm is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/_npm_tool.sh
. scripts/_npm_tool.sh

version=0.61.0
dir=$PWD/.tools/gemini-$version

find_launcher() {  # the package's launcher, if installed
    local launcher=$dir/node_modules/@google/gemini-cli/bundle/gemini.js
    [ -x "$launcher" ] && { echo "$launcher"; return 0; }
    return 1
}

if ! launcher=$(find_launcher); then
    # No scripts: the CLI itself has none; of its optional native modules, @github/keytar's
    # only copies its prebuilt binary (without it the CLI keeps secrets in a file, which it
    # falls back to anyway where no keyring runs) and node-pty's compiles with node-gyp. The
    # CLI takes @lydell/node-pty first, whose platform package carries its binary prebuilt.
    npm_install gemini "$dir" "@google/gemini-cli@$version" --ignore-scripts
    launcher=$(find_launcher) || {
        echo "gemini: no launcher bundle/gemini.js in $dir" >&2
        exit 1
    }
fi
# Checked in a home of its own: any run writes a project registry under $GEMINI_CLI_HOME/.gemini.
check_home=$(mktemp -d)
trap 'rm -rf "$check_home"' EXIT
GEMINI_CLI_HOME=$check_home GEMINI_CLI_NO_RELAUNCH=true "$launcher" --version >/dev/null 2>&1 || {
    echo "gemini: $launcher does not run (it needs node.js 20 or later on PATH)" >&2
    exit 1
}
rm -rf "$check_home"
trap - EXIT
link_for_nodeprov gemini "$launcher"
echo "$launcher"
