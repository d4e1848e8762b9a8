# What the scripts that install an agent CLI from the npm registry at a pinned version share
# (codex.sh, opencode.sh, gemini.sh, qwen.sh, copilot.sh; examples.sh takes its npm from here
# too): sourced by them, not run. Each script keeps what is its own: its version and package,
# where its launcher lies in the install, how it is checked, and whether it is linked for
# nodeprov.

# ensure_npm NAME: installs Debian's nodejs and npm when npm is missing. That needs root:
# otherwise "NAME: npm is missing and installing it needs root" on stderr and exit 1.
ensure_npm() {
    local name=$1
    if ! command -v npm >/dev/null; then
        if [ "$(id -u)" != 0 ]; then
            echo "$name: npm is missing and installing it needs root" >&2
            exit 1
        fi
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    fi
}

# npm_install NAME DIR PACKAGE@VERSION [NPM_FLAG...]: installs the package with its
# dependencies under DIR (DIR/node_modules/...), npm first (ensure_npm NAME). It is installed
# into DIR.partial.PID, removed should the install fail, and moved over DIR once complete: an
# interrupted install leaves no DIR that looks installed. The extra flags (--ignore-scripts)
# go to `npm install` before the package; npm's own output is dropped, its errors are not.
npm_install() {
    local name=$1 dir=$2 package=$3
    shift 3
    ensure_npm "$name"
    local staging=$dir.partial.$$
    rm -rf "$staging"
    # shellcheck disable=SC2064  # the path expanded now: the trap may run after this returns
    trap "rm -rf $(printf %q "$staging")" EXIT
    mkdir -p "$staging"
    npm install --prefix "$staging" --no-audit --no-fund --loglevel=error --silent "$@" \
        "$package" >/dev/null
    rm -rf "$dir"
    mv "$staging" "$dir"
    trap - EXIT
}

# link_for_nodeprov NAME PATH: links PATH as NAME under $XDG_DATA_HOME/nodeprov/bin (an
# absolute XDG_DATA_HOME only, else ~/.local/share), where nodeprov looks after PATH
# (nodeprov/agents/_installed.py): the CLI is found with nothing exported.
link_for_nodeprov() {
    local name=$1 target=$2
    local bin_dir=${XDG_DATA_HOME:-$HOME/.local/share}/nodeprov/bin
    case $bin_dir in /*) ;; *) bin_dir=$HOME/.local/share/nodeprov/bin ;; esac
    mkdir -p "$bin_dir"
    ln -sfn "$target" "$bin_dir/$name"
}
