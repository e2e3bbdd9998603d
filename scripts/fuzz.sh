#!/usr/bin/env bash
# A long fuzzing campaign of one target (tests/fuzz/README lists them), nice'd:
#   scripts/fuzz.sh TARGET [SECONDS] [-- libFuzzer flags, e.g. -jobs=2 -workers=2]
# Builds what the target needs (tests/fuzz/build.py: the libFuzzer binary, or the ASan+UBSan _tracecore for
# atheris) under .cache/, starts from the checked-in seeds (tests/fuzz/corpus/TARGET) and the work corpus
# of earlier campaigns (.cache/fuzz-corpus/TARGET), and saves what it finds in .cache/fuzz-runs/TARGET/
# (crash-*, timeout-*, oom-*). Keep a finding as a regression test (tests/data/fuzz/) once it is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
    echo "usage: scripts/fuzz.sh TARGET [SECONDS] [-- libFuzzer flags]" >&2
    exec .venv/bin/python tests/fuzz/run.py
fi
target=$1
seconds=${2:-600}
shift $(( $# >= 2 ? 2 : 1 ))
exec .venv/bin/python tests/fuzz/run.py "$target" "$seconds" "$@"
