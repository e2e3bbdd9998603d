"""Replays inputs through fuzz targets once each, without atheris (no instrumenting, one process):

    python tests/fuzz/replay.py TARGET [FILE...]   # FILEs, or every seed of corpus/TARGET
    python tests/fuzz/replay.py --all              # every Python target's seeds, and tests/data/fuzz

tests/test_sanitized.py runs it with the ASan+UBSan _tracecore; a finding of a campaign is replayed the
same way to see its traceback. The targets' rule applies: an exception other than the readers' own
one-line errors stops the replay, naming the input.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ["IOSCOPE_FUZZ_REPLAY"] = "1"
sys.path.insert(0, str(HERE))
import run as fuzzrun  # noqa: E402

# the regression inputs are blktrace files: the readers of those files and dumps replay them too
REGRESSIONS = {"blktrace": HERE.parent / "data" / "fuzz", "dump": HERE.parent / "data" / "fuzz"}


def replay(target: str, files: list[Path]) -> int:
    mod = importlib.import_module(f"fuzz_{target}")
    one = mod.one
    import common
    for f in files:
        try:
            one(f.read_bytes())
        except BaseException:
            sys.stderr.write(f"replay: {target}: {f} raised:\n")
            raise
        finally:
            if "common" in sys.modules:
                common.clean()
    return len(files)


def main(argv: list[str]) -> int:
    if argv == ["--all"]:
        jobs = []
        for t in fuzzrun.PY_TARGETS:
            files = sorted((HERE / "corpus" / t).iterdir())
            if t in REGRESSIONS:
                files += sorted(REGRESSIONS[t].glob("*.blktrace.*"))
            jobs.append((t, files))
    elif argv and argv[0] in fuzzrun.PY_TARGETS:
        jobs = [(argv[0], [Path(a) for a in argv[1:]] or sorted((HERE / "corpus" / argv[0]).iterdir()))]
    else:
        sys.stderr.write(f"usage: replay.py TARGET [FILE...] | --all; targets: {' '.join(fuzzrun.PY_TARGETS)}\n")
        return 2
    for t, files in jobs:
        t0 = time.monotonic()
        n = replay(t, files)
        print(f"{t}: {n} inputs replayed in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
