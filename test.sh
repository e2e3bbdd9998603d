#!/usr/bin/env bash
# Command 2: the whole test suite (Debian 12, as root): lint, type check, unit
# tests and live BPF tests on real loop devices. With CI set, live tests that
# cannot run fail instead of skipping.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh --test
echo "== ruff"; .venv/bin/ruff check lib tests bench tools scripts
echo "== mypy"; .venv/bin/mypy; .venv/bin/mypy --strict scripts/kernels.py
echo "== import contracts (layers, no tool imports another, no cycles: pyproject.toml)"; .venv/bin/lint-imports --no-cache
echo "== pytest"; .venv/bin/python -m pytest -q --durations=25 tests "$@"
# Every Debian kernel users run, booted under QEMU with the guest suite inside (scripts/kernels.py;
# README: "Kernels"). IOSCOPE_KERNELS="6.1 5.10" runs only those on a developer's machine, "none"
# none of them; CI (which sets CI and not IOSCOPE_KERNELS) always runs the whole matrix.
kernels=${IOSCOPE_KERNELS:-}
if [ "$kernels" != none ]; then
    echo "== kernel matrix"
    # shellcheck disable=SC2086
    exec .venv/bin/python scripts/kernels.py run $kernels
fi
