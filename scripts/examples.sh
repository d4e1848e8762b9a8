#!/usr/bin/env bash
# Install the npm dependencies of the examples (examples/*/package-lock.json) with `npm ci`,
# from the npm registry this machine is set up for, once per lockfile: an example whose
# node_modules/ was installed from the same lockfile (its SHA-256 is kept in
# node_modules/.nodeprov-lock) is left alone. Prints each example's directory. Needs Node.js
# 20 or later; installs Debian's nodejs and npm when npm is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

exec 9<"$0"
flock 9  # one install at a time: `npm ci` empties node_modules/ first

# shellcheck source=scripts/_npm_tool.sh
. scripts/_npm_tool.sh
ensure_npm examples
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
    echo "examples: Node.js $(node --version) is too old: the examples need 20 or later" >&2
    exit 1
fi

for lock in examples/*/package-lock.json; do
    [ -f "$lock" ] || continue
    dir=$(dirname "$lock")
    hash=$(sha256sum "$lock" | cut -d' ' -f1)
    stamp=$dir/node_modules/.nodeprov-lock
    if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ]; then
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error --silent >/dev/null)
        echo "$hash" >"$stamp"
    fi
    echo "$PWD/$dir"
done
