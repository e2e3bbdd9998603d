"""The offline readers' tests again with _tracecore built with ASan and UBSan (tests/fuzz/build.py: clang
-fsanitize=address,undefined -fno-sanitize-recover=undefined, into .cache/sanitized/, never over lib/'s
build), in a Python that preloads ASan's runtime: any heap overflow, use after free or undefined behaviour
in the C readers, on the regression inputs of tests/data/fuzz and the readers' own fuzz tests, fails here.
Where the build is impossible (no clang, no libclang-rt-14-dev) the test skips, and fails when CI is set.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS / "fuzz"))
import build  # noqa: E402

# the readers' hypothesis fuzzing, the pairing engine's own cases, and the regression tests that call the
# C readers in this process (the rest run the CLI on the same inputs: replay.py below reads those in one)
UNDER_SANITIZERS = ["test_blktrace_fuzz.py", "test_pairing.py", "test_reader_regressions.py"]
IN_PROCESS = ("pairs_once or past_2_64_stops or pid_table or checked_once or note_time or inflate or saturates "
              "or blkparse_counters "
              "or gather")
REPORT = re.compile(r"ERROR: AddressSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer")


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    try:
        ext = build.build_ext()
        e = build.sanitized_env(ext)
    except build.BuildError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the sanitized _tracecore cannot be built: {exc}")
        pytest.skip(f"the sanitized _tracecore cannot be built: {exc}")
    return e


def test_the_sanitized_build_is_the_one_loaded(env: dict[str, str]) -> None:
    p = subprocess.run([sys.executable, "-c", "import ioscope.capture._tracecore as t; print(t.__file__)"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == env["IOSCOPE_SANITIZED_TRACECORE"]
    assert "/.cache/sanitized/" in p.stdout


def test_a_sanitizer_report_is_seen(env: dict[str, str]) -> None:
    """The runtime is live: a buffer of the wrong size given to gather_blktrace is refused, and a read
    past a real buffer (through ctypes, outside _tracecore) is reported and stops the process."""
    code = ("import ctypes; b = ctypes.create_string_buffer(8); "
            "ctypes.memmove(ctypes.c_char_p(b'x' * 16), ctypes.addressof(b), 64)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode != 0 and "ERROR: AddressSanitizer" in p.stderr, p.stderr[-2000:]


def _clean(p: subprocess.CompletedProcess[str]) -> str:
    out = p.stdout + p.stderr
    m = REPORT.search(out)
    assert m is None, out[max(0, m.start() - 2000):m.start() + 6000] if m else ""
    assert p.returncode == 0, out[-6000:]
    return out


def test_every_seed_and_regression_input_through_every_reader(env: dict[str, str]) -> None:
    """tests/fuzz/replay.py --all: each Python fuzz target's seeds, and tests/data/fuzz's inputs, through
    its readers (parse, report, import, export, agg -r, the bundle, HTTP, web config and expression readers)."""
    p = subprocess.run([sys.executable, str(TESTS / "fuzz" / "replay.py"), "--all"], capture_output=True,
                       text=True, env=env, timeout=600, cwd=TESTS.parent)
    out = _clean(p)
    regress = len(list((TESTS / "data" / "fuzz").glob("*.blktrace.*")))
    for target in ("blktrace", "dump", "capture", "fileset", "bundle", "http", "webconfig", "aggexpr"):
        n = len(list((TESTS / "fuzz" / "corpus" / target).iterdir()))
        n += regress if target in ("blktrace", "dump") else 0
        assert f"{target}: {n} inputs replayed" in out, out[-3000:]


def test_reader_tests_under_asan_and_ubsan(env: dict[str, str]) -> None:
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                        *[str(TESTS / t) for t in UNDER_SANITIZERS], "-k", f"not test_reader_regressions or "
                        f"({IN_PROCESS})"],
                       capture_output=True, text=True, env=env, timeout=900, cwd=TESTS.parent)
    out = _clean(p)
    assert re.search(r"\d+ passed", out) and "deselected" in out, out[-2000:]
