"""report's and diff's --html FILE, --png DIR and --svg DIR (docs/pages.md)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ioscope.base import outfile

if TYPE_CHECKING:   # report --help imports this module: no numpy here
    from ioscope.engines.pages.figures import Table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--html", metavar="FILE", help="write the pictures as one self-contained page (opens offline)")
    p.add_argument("--png", metavar="DIR", help="write each picture as DIR/NAME.png")
    p.add_argument("--svg", metavar="DIR", help="write each picture as DIR/NAME.svg")


def wanted(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "html", None) or getattr(args, "png", None) or getattr(args, "svg", None))


def _write(args: argparse.Namespace, tool: str, doc: str, pics: dict[str, dict[str, object]],
           data: dict[str, Table]) -> None:
    from ioscope.engines.pages.static import write_pictures
    if args.html:
        body = doc.encode()
        with outfile.open_private(args.html, "wb", force=True) as f:
            f.write(body)
        sys.stderr.write(f"ioscope {tool}: wrote {args.html} ({len(body) / 1e6:.1f} MB, self-contained)\n")
    for fmt in ("svg", "png"):
        d = getattr(args, fmt, None)
        if d:
            paths = write_pictures(pics, data, d, fmt)
            sys.stderr.write(f"ioscope {tool}: wrote {len(paths)} pictures to {d}: "
                             + ", ".join(os.path.basename(x) for x in paths) + "\n")


def _check(args: argparse.Namespace) -> None:
    if args.html:
        outfile.check_output(args.html, True)


def run_report(args: argparse.Namespace) -> int:
    from ioscope.engines.pages.cells import aggregate
    from ioscope.engines.pages.html import report_page
    _check(args)
    cells = aggregate(args.capture)
    doc, pics, data = report_page(cells)
    _write(args, "report", doc, pics, data)
    return 0


def run_diff(args: argparse.Namespace) -> int:
    from ioscope.engines.pages.cells import aggregate
    from ioscope.engines.pages.diff import diff_page
    _check(args)
    doc, pics, data = diff_page(aggregate(args.before), aggregate(args.after))
    _write(args, "diff", doc, pics, data)
    return 0


__all__ = ["add_arguments", "run_diff", "run_report", "wanted"]
