#!/usr/bin/env bash
# The whole test suite as three pytest processes at once (this machine has two cores, and
# most tests wait on engines, not on a core): tests/ (the fast tests, whose nodes are local
# directories of their own and fakes) and the agents' conformance and checkpoints on local
# nodes in one; the Docker, local, store and CLI tests and the agents' conformance and
# checkpoints on Docker nodes in another; the providers reached over SSH (SSH, EC2,
# Codespaces), Kubernetes and the agents' conformance and checkpoints on their nodes in the
# third. Each
# process has its own temporary directory, sshd and cluster. Nodes never cross: garbage
# collection runs per provider, and every engine's tests (Docker's, the SSH hosts',
# Kubernetes') are in one process. The reports follow one another; the exit status is the
# worst of the three. Arguments go to all (e.g. --durations=30).
set -uo pipefail
cd "$(dirname "$0")/.."
pytest=.venv/bin/pytest
fast=(tests)
engines=()
remote=()
for file in integration/test_*.py; do
    case $file in
        *agent_conformance_local* | *checkpoints_agents_local*) fast+=("$file") ;;
        *agent_conformance_docker* | *checkpoints_agents_docker*) engines+=("$file") ;;
        *ssh* | *ec2* | *codespaces* | *kubernetes* | *agent_conformance* | *checkpoints_agents*) remote+=("$file") ;;
        *) engines+=("$file") ;;
    esac
done
fast_log=$(mktemp)
engines_log=$(mktemp)
trap 'rm -f "$fast_log" "$engines_log"' EXIT
"$pytest" --basetemp=/tmp/nodeprov-tests-1 "$@" "${engines[@]}" >"$engines_log" 2>&1 &
engines_pid=$!
"$pytest" --basetemp=/tmp/nodeprov-tests-3 "$@" "${fast[@]}" >"$fast_log" 2>&1 &
fast_pid=$!
"$pytest" --basetemp=/tmp/nodeprov-tests-2 "$@" "${remote[@]}"
remote_status=$?
wait "$engines_pid"
engines_status=$?
wait "$fast_pid"
fast_status=$?
echo
echo "==================== the Docker, local, store and CLI tests"
cat "$engines_log"
echo
echo "==================== tests/"
cat "$fast_log"
worst=$remote_status
for status in "$engines_status" "$fast_status"; do
    [ "$status" -gt "$worst" ] && worst=$status
done
exit "$worst"
