#!/usr/bin/env bash
# The whole test suite as two pytest processes at once (this machine has two cores and most
# tests wait on engines): the fast tests with the Docker, local, store and CLI tests and the
# agents' conformance on local nodes in one; the providers reached over SSH (SSH, EC2,
# Codespaces), Kubernetes and the agents' conformance on the other nodes in the other. Each process has its own temporary directory, sshd and cluster.
# Nodes never cross: garbage collection runs per provider, and every provider's tests are in
# one process. The first process's report follows the second's; the exit status is the
# worse of the two. Arguments go to both (e.g. --durations=30).
set -uo pipefail
cd "$(dirname "$0")/.."
pytest=.venv/bin/pytest
first=(tests)
second=()
for file in integration/test_*.py; do
    case $file in
        *agent_conformance_local*) first+=("$file") ;;
        *ssh* | *ec2* | *codespaces* | *kubernetes* | *agent_conformance*) second+=("$file") ;;
        *) first+=("$file") ;;
    esac
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$pytest" --basetemp=/tmp/nodeprov-tests-1 "$@" "${first[@]}" >"$log" 2>&1 &
first_pid=$!
"$pytest" --basetemp=/tmp/nodeprov-tests-2 "$@" "${second[@]}"
second_status=$?
wait "$first_pid"
first_status=$?
echo
echo "==================== the first process: tests/ and the Docker, local, store and CLI tests"
cat "$log"
exit $((first_status > second_status ? first_status : second_status))
