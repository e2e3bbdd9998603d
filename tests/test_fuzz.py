"""A short bounded run of every fuzz target (tests/fuzz/README), as the suite's part of the campaigns.

Each target starts from a few of its checked-in seeds (the smallest: its init runs every seed through every
reader), with a fixed libFuzzer seed, for a few seconds; two targets at a time (the machine's two CPUs).
A crash, a hang (-timeout) or memory past the limit (-rss_limit_mb) fails the target's test, naming the
saved input; scripts/fuzz.sh TARGET SECONDS reruns it for long. The ASan+UBSan builds are made (and cached
under .cache/) by tests/fuzz/build.py: where they cannot be built the tests skip, and fail when CI is set.
"""

from __future__ import annotations

import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
import build
import run as fuzzrun

# seconds of fuzzing after each target's init (the C target runs ~1,000 inputs a second, the Python ones
# 10 to 1,000): enough to pass the seeds' neighbourhood, short enough for the suite (tests/fuzz/README)
SECONDS = {"tracecore": 4}
DEFAULT_SECONDS = 2
SEEDS = 3   # the smallest seeds of each target


def _prepared(target: str, tmp: Path) -> Path:
    work = tmp / target / "work"
    work.mkdir(parents=True)
    seeds = sorted((fuzzrun.HERE / "corpus" / target).iterdir(), key=lambda p: (p.stat().st_size, p.name))
    for p in seeds[:SEEDS]:
        shutil.copy(p, work / p.name)
    return work


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, fuzzrun.Result]:
    tmp = tmp_path_factory.mktemp("fuzz")
    try:   # build first, once: the runs below only read the cache
        build.build_fuzzer("tracecore")
        build.asan_with_fuzzer()
        build.build_ext()
    except build.BuildError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the fuzz targets cannot be built: {exc}")
        pytest.skip(f"the fuzz targets cannot be built: {exc}")

    def one(target: str) -> fuzzrun.Result:
        # only a few seeds (copied into the work corpus): the suite's run is a short one
        return fuzzrun.run(target, SECONDS.get(target, DEFAULT_SECONDS), _prepared(target, tmp),
                           tmp / target / "artifacts", seed=1, timeout=300, seeds=False)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(fuzzrun.TARGETS, pool.map(one, fuzzrun.TARGETS)))


@pytest.mark.parametrize("target", fuzzrun.TARGETS)
def test_target_finds_nothing(results: dict[str, fuzzrun.Result], target: str) -> None:
    r = results[target]
    assert not r.artifacts, \
        f"{target}: saved {', '.join(r.artifacts)}; rerun: scripts/fuzz.sh {target}\n{r.log[-4000:]}"
    assert r.returncode == 0, f"{target}: exit {r.returncode}\n{r.log[-4000:]}"
    assert r.execs > SEEDS, f"{target}: {r.execs} executions\n{r.log[-3000:]}"   # it ran past its seeds
    assert r.coverage > 0, f"{target}: no coverage: not instrumented\n{r.log[-3000:]}"
