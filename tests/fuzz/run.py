"""Runs one fuzz target: python tests/fuzz/run.py TARGET [SECONDS] [-- libFuzzer flags]

The C target (tracecore) is its libFuzzer binary; the Python targets run under atheris with the ASan+UBSan
_tracecore (tests/fuzz/build.py). Both take libFuzzer's flags. The checked-in seeds (corpus/TARGET) are read;
what the run finds goes to a work corpus (.cache/fuzz-corpus/TARGET by default, never the seeds) and a
crash, a timeout or an out-of-memory input to the artifact directory, named in the result.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build

HERE = Path(__file__).resolve().parent
C_TARGETS = ["tracecore"]
PY_TARGETS = ["blktrace", "dump", "capture", "fileset", "bundle", "http", "webconfig", "aggexpr"]
TARGETS = C_TARGETS + PY_TARGETS
# the libFuzzer flags of every run: an input is a finding when it takes 20 s (a hang: the readers take
# under a second on the seeds, under ASan) or the process passes 2 GB (memory sized by a number in the
# file; a reader of a few KB needs a few hundred MB at most, most of it CPython, numpy and pyarrow)
FLAGS = ["-timeout=20", "-rss_limit_mb=2048", "-max_len=16384", "-print_final_stats=1"]


@dataclass
class Result:
    target: str
    returncode: int
    execs: int
    seconds: int
    coverage: int            # libFuzzer's cov: (edges; for atheris, Python and C together)
    features: int
    artifacts: list[str]
    log: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.artifacts


def _last(pattern: str, text: str) -> int:
    m = re.findall(pattern, text)
    return int(m[-1]) if m else 0


def command(target: str) -> tuple[list[str], dict[str, str]]:
    if target in C_TARGETS:
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = build.ASAN_OPTIONS
        env["UBSAN_OPTIONS"] = build.UBSAN_OPTIONS
        return [str(build.build_fuzzer(target))], env
    if target in PY_TARGETS:
        env = build.sanitized_env(build.build_ext(), fuzzer=True)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
        return [sys.executable, str(HERE / f"fuzz_{target}.py")], env
    raise SystemExit(f"unknown target {target!r}; one of {', '.join(TARGETS)}")


def run(target: str, seconds: int, work: Path, artifacts: Path, seed: int | None = None,
        extra: list[str] | None = None, timeout: float | None = None, seeds: bool = True) -> Result:
    """libFuzzer's run of the target: work (a corpus it adds to) and, with seeds, the checked-in seeds."""
    cmd, env = command(target)
    work.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    args = [*cmd, *FLAGS, f"-max_total_time={seconds}", f"-artifact_prefix={artifacts}/",
            *([f"-seed={seed}"] if seed is not None else []), *(extra or []), str(work),
            *([str(HERE / "corpus" / target)] if seeds else [])]
    p = subprocess.run(["nice", "-n", "10", *args], capture_output=True, text=True, env=env,
                       timeout=timeout if timeout is not None else seconds * 3 + 120)
    log = p.stdout + p.stderr
    # a slow unit (over 10 s) is no finding: a hang is one past -timeout (a loaded machine slows them all)
    found = sorted(str(f) for f in artifacts.iterdir() if f.name.split("-")[0] in ("crash", "timeout", "oom", "leak"))
    return Result(target, p.returncode, _last(r"stat::number_of_executed_units:\s*(\d+)", log),
                  _last(r"Done \d+ runs in (\d+) second", log),
                  _last(r"cov: (\d+)", log), _last(r"ft: (\d+)", log), found, log)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in TARGETS:
        sys.stderr.write(f"usage: run.py TARGET [SECONDS] [-- libFuzzer flags]; targets: {' '.join(TARGETS)}\n")
        return 2
    target = argv[0]
    seconds = int(argv[1]) if len(argv) > 1 and argv[1] != "--" else 60
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    root = build.CACHE / "fuzz-runs"
    try:
        r = run(target, seconds, build.CACHE / "fuzz-corpus" / target, root / target, None, extra,
                timeout=seconds * 2 + 600)
    except build.BuildError as exc:
        sys.stderr.write(f"fuzz: {exc}\n")
        return 1
    sys.stderr.write(r.log[-3000:])
    print(f"{target}: {r.execs} executions in {r.seconds} s, cov {r.coverage}, ft {r.features}, "
          f"exit {r.returncode}; findings: {', '.join(r.artifacts) or 'none'}")
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
