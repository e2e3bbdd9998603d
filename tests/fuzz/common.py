"""What the Python fuzz targets share: atheris set up over ioscope's own modules (coverage of them guides
it), and the command line run in this process as a user runs it, with the house's rule checked on every
input: exit 0, or exit 1 with one line 'ioscope TOOL: error: ...'; any other exception is the finding (it
propagates to atheris, which saves the input). The ASan+UBSan _tracecore is loaded by site/sitecustomize.py
when tests/fuzz/run.py starts the target."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import atheris


def instrument(*packages: str) -> None:
    """Import every module of these packages instrumented: the readers import most of theirs inside
    functions, and a module imported after the instrumenting block would give atheris no coverage.
    Replaying inputs (replay.py: IOSCOPE_FUZZ_REPLAY) needs no coverage: plain imports."""
    import importlib
    import pkgutil
    replay = bool(os.environ.get("IOSCOPE_FUZZ_REPLAY"))
    with contextlib.nullcontext() if replay else atheris.instrument_imports(include=["ioscope"]):
        for name in packages:
            pkg = importlib.import_module(name)
            for m in pkgutil.walk_packages(pkg.__path__, f"{name}."):
                try:
                    importlib.import_module(m.name)
                except Exception:   # a module this host cannot load (a live tool's): not a reader's
                    continue


# the readers and what they call on a capture's way (not pages' pictures, not the live collectors)
instrument("ioscope.capture", "ioscope.engines.pairing", "ioscope.engines.aggregate", "ioscope.tools.parse",
           "ioscope.tools.report", "ioscope.tools.export", "ioscope.tools.agg", "ioscope.tools.importer")
import ioscope.cli  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ioscope-fuzz-")


class Finding(AssertionError):
    """The reader broke the house's rule without an exception (a wrong exit code, a multi-line error)."""


def cli(*argv: str) -> int:
    """ioscope ARGV in this process; output thrown away, the error rule checked."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace")
    err = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = ioscope.cli.main(list(argv))
    text = err.getvalue()
    if rc not in (0, 1):
        raise Finding(f"ioscope {' '.join(argv)}: exit {rc}: {text[-2000:]}")
    if rc == 1:
        errors = [ln for ln in text.splitlines() if ": error: " in ln]
        if len(errors) != 1 or not text.rstrip("\n").endswith(errors[0]) or "Traceback" in text:
            raise Finding(f"ioscope {' '.join(argv)}: not one error line: {text[-2000:]}")
    return rc


def path(name: str) -> str:
    return os.path.join(TMP, name)


def write(name: str, data: bytes) -> str:
    p = path(name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def clean() -> None:
    for n in os.listdir(TMP):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(TMP, n))


def readers(src: str, capture: bool) -> None:
    """Every offline reader of a source: parse, report (JSON and btt's layout), export, agg -r; a source
    that is not a capture is imported first (import's own reading), and the capture read again."""
    cli("parse", src)
    cli("report", "--json", src)
    cli("report", "--btt", src)
    if not capture:
        cap = path("imported.ioscope")
        if cli("import", src, "-f", "-o", cap) != 0:
            return
        src = cap
        cli("parse", src)
    cli("export", "-f", "-o", path("export.bin"), src)
    cli("agg", "-r", src, "-e", "count() by comm,op", "-e", "avg(q2d) by disk", "-j")


def run(one: Callable[[bytes], Any]) -> None:
    def wrapped(data: bytes) -> None:
        try:
            one(data)
        finally:
            clean()
    atheris.Setup(sys.argv, wrapped)
    atheris.Fuzz()
