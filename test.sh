#!/usr/bin/env bash
# Command 2: the whole test suite (Debian 12, as root): lint, type check, unit
# tests and live BPF tests on real loop devices, and every Debian kernel of the
# matrix booted under QEMU. With CI set, live tests that cannot run fail instead
# of skipping.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh --test
echo "== ruff"; .venv/bin/ruff check lib tests bench tools scripts
echo "== mypy"; .venv/bin/mypy; .venv/bin/mypy --strict scripts/kernels.py
echo "== import contracts (layers, no tool imports another, no cycles: pyproject.toml)"; .venv/bin/lint-imports --no-cache
# Every Debian kernel users run, booted under QEMU with the guest suite inside (scripts/kernels.py;
# README: "Kernels"). IOSCOPE_KERNELS="6.1 5.10" runs only those on a developer's machine, "none"
# none of them; CI (which sets CI and not IOSCOPE_KERNELS) always runs the whole matrix.
# The matrix runs beside the host suite, not after it: its guests are CPU-bound emulation (two at a time,
# one vCPU each) and the host suite waits on workloads and tools much of its time (docs/kernels.md, "The
# budget": .ci/run took 31 minutes so, beside a CPU hog and a disk hog; 70-79 one after the other). Its
# output follows the host suite's.
kernels=${IOSCOPE_KERNELS:-}
matrix_pid=""
pytest_pid=""
# A stop (Ctrl-C, or SIGTERM/SIGHUP sent to this script alone: a CI runner's timeout) stops both at once:
# pytest tears its test down and prints its summary (tests/harness.py: SIGTERM is its Ctrl-C), and
# kernels.py kills its guests. Both run in the background, waited for: bash runs a trap only once its
# foreground command has ended, which for pytest would be after the whole suite.
stop_all() {
    for pid in $pytest_pid $matrix_pid; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    exit "$1"
}
trap 'stop_all 130' INT
trap 'stop_all 143' TERM
trap 'stop_all 129' HUP
if [ "$kernels" != none ]; then
    matrix_log=$(mktemp /tmp/ioscope-matrix.XXXXXX.log)
    echo "== kernel matrix: started beside the host suite (its log: $matrix_log)"
    # shellcheck disable=SC2086
    .venv/bin/python scripts/kernels.py run $kernels >"$matrix_log" 2>&1 &
    matrix_pid=$!
fi
echo "== pytest"
suite=0
.venv/bin/python -m pytest -q --durations=25 tests "$@" &
pytest_pid=$!
wait "$pytest_pid" || suite=$?
pytest_pid=""
matrix=0
if [ -n "$matrix_pid" ]; then
    echo "== kernel matrix (waiting for it)"
    wait "$matrix_pid" || matrix=$?
    matrix_pid=""
    cat "$matrix_log"
    rm -f "$matrix_log"
fi
if [ "$suite" != 0 ] || [ "$matrix" != 0 ]; then
    echo "test.sh: host suite exit $suite, kernel matrix exit $matrix" >&2
    exit 1
fi
