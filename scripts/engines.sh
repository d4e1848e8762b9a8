#!/usr/bin/env bash
# Install and start what the integration tests need, when it is missing:
#   - a Docker engine (Debian's docker.io; dockerd started in the background),
#   - debootstrap, and the offline-built test base image (integration/images/build-base.sh),
#   - a PostgreSQL server (Debian's postgresql) with the role and database the tests use
#     (postgresql://nodeprov:nodeprov@127.0.0.1:5432/nodeprov_test),
#   - curl, which the docs' HTTP examples use (integration/test_newcomer.py),
#   - OpenSSH's sshd (Debian's openssh-server; not started: each test starts its own, with
#     its own configuration and keys, on 127.0.0.1),
#   - a C compiler, which builds the benchmarks' fake agent (bench/fake_agent.c; its test,
#     tests/test_bench_fake_agent.py, fails in CI without one).
# Idempotent: what is already there is left alone. Needs root for the installs.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_updated=""
install() {  # install Debian packages, updating the index once
    if [ "$(id -u)" != 0 ]; then
        echo "engines: need root to install $*; the tests that need them will skip" >&2
        return 1
    fi
    [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

engine_up() { docker info >/dev/null 2>&1; }

clear_stale_pidfile() {  # a daemon killed without cleanup leaves its pid file, and refuses to start
    local file=$1 pid state
    [ -f "$file" ] || return 0
    pid=$(cat "$file" 2>/dev/null || true)
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    if [ -z "$pid" ] || [ -z "$state" ] || [ "$state" = Z ]; then
        rm -f "$file"
    fi
}

start_dockerd() {
    clear_stale_pidfile /var/run/docker.pid
    clear_stale_pidfile /var/run/docker/containerd/containerd.pid
    echo "engines: starting dockerd" >&2
    nohup dockerd >/var/log/nodeprov-dockerd.log 2>&1 &
    for _ in $(seq 1 120); do
        engine_up && break
        sleep 0.5
    done
    engine_up || { echo "engines: dockerd did not start; see /var/log/nodeprov-dockerd.log" >&2; exit 1; }
}

if ! engine_up; then
    command -v dockerd >/dev/null && command -v docker >/dev/null || install docker.io || exit 0
    start_dockerd
fi

[ -x /usr/sbin/sshd ] || install openssh-server || exit 0
systemctl disable --now ssh >/dev/null 2>&1 || true  # the package's own daemon is not wanted

command -v cc >/dev/null || install gcc libc6-dev || exit 0
command -v curl >/dev/null || install curl || exit 0  # the docs' HTTP examples (integration/test_newcomer.py)
command -v debootstrap >/dev/null || install debootstrap || exit 0
image=$(integration/images/build-base.sh)
echo "engines: test image $image" >&2
# An engine that answers but cannot remove a container fails the suite late and slowly
# (Debian's dockerd 20.10 deadlocked so once, removing many auto_remove containers at once):
# a probe container must be made and removed within a minute, or the engine starts anew.
if ! timeout 60 docker run --rm --network none "$image" true >/dev/null 2>&1; then
    echo "engines: dockerd cannot run and remove a container; restarting it" >&2
    pkill -x dockerd || true
    pkill -x containerd || true
    sleep 5
    pkill -9 -x dockerd || true  # under set -e: none left to kill is no failure
    pkill -9 -x containerd || true
    start_dockerd
    timeout 60 docker run --rm --network none "$image" true >/dev/null 2>&1 ||
        { echo "engines: dockerd still cannot run a container" >&2; exit 1; }
fi

command -v pg_ctlcluster >/dev/null || install postgresql || exit 0
version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
if [ -z "$version" ]; then
    version=$(ls /usr/lib/postgresql | sort -V | tail -1)
    pg_createcluster "$version" main >/dev/null
fi
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main"' | grep -q online; then
    echo "engines: starting PostgreSQL $version" >&2
    pg_ctlcluster "$version" main start
fi
as_postgres() { su postgres -c "psql -v ON_ERROR_STOP=1 -qtA -c \"$1\""; }
[ "$(as_postgres "SELECT 1 FROM pg_roles WHERE rolname = 'nodeprov'")" = 1 ] ||
    as_postgres "CREATE ROLE nodeprov LOGIN PASSWORD 'nodeprov'"
[ "$(as_postgres "SELECT 1 FROM pg_database WHERE datname = 'nodeprov_test'")" = 1 ] ||
    as_postgres "CREATE DATABASE nodeprov_test OWNER nodeprov"
echo "engines: PostgreSQL $version ready" >&2
