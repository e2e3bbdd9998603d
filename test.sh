#!/usr/bin/env bash
# Command 2: the whole test suite (Debian 12, as root): lint, type check, unit
# tests and live BPF tests on real loop devices. With CI set, live tests that
# cannot run fail instead of skipping.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh --test
echo "== ruff"; .venv/bin/ruff check lib tests bench tools scripts
echo "== mypy"; .venv/bin/mypy
echo "== pytest"; exec .venv/bin/python -m pytest -q tests "$@"
