#!/usr/bin/env bash
# Set up what the test suite needs and run it. Extra arguments go to pytest (e.g. --runslow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/venv.sh dev
# an affected runtime for the runtime-matrix tests (the newest is the dev venv itself)
bash tools/venv.sh ov 2026.0.0
exec .venvs/dev/bin/python -m pytest -q "$@"
