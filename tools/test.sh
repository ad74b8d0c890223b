#!/usr/bin/env bash
# Set up what the test suite needs and run it. Extra arguments go to pytest (e.g. --runslow; -n 0 runs
# the tests in this process, one after another).
set -euo pipefail
cd "$(dirname "$0")/.."
# strace delivers the signals and faults of the file-layer tests (tests/test_file_commit.py)
if ! command -v strace >/dev/null; then
    if [[ $(id -u) == 0 ]]; then
        apt-get update -qq >/dev/null && apt-get install -y -qq strace >/dev/null
    else
        echo "tools/test.sh: strace is missing and this user cannot install it (apt-get install strace)" >&2
    fi
fi
bash tools/venv.sh dev
# an affected runtime for the runtime-matrix tests (the newest is the dev venv itself)
bash tools/venv.sh ov 2026.0.0
# one pytest-xdist worker per core (one process left a 2-core machine's second core idle about half the
# time); --dist loadgroup keeps the tests of one xdist_group (runtime cells that share a process) on one worker
pytest=(.venvs/dev/bin/python -m pytest -q -n auto --dist loadgroup)
# the tests' temporary folders (about 0.9 GB) in memory where /dev/shm is a writable tmpfs and --basetemp is not
# given: the commits' fsyncs on this VM's disk cost the file-layer tests 15% of their time (measured 2026-12-07);
# removed after a run that passes, kept (and named) after one that fails
if [[ " $* " != *" --basetemp"* ]] && [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs && -w /dev/shm ]]; then
    base=$(mktemp -d /dev/shm/ovpasses-tests.XXXXXX)
    status=0
    "${pytest[@]}" --basetemp="$base" "$@" || status=$?
    if [[ $status == 0 ]]; then rm -rf "$base"; else echo "tools/test.sh: the tests' temporary folders: $base" >&2; fi
    exit $status
fi
exec "${pytest[@]}" "$@"
