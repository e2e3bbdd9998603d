"""ioscope btt's files: btt's .avg text (engines/pairing/bttavg.py, report's btt sections) and btt's per-I/O
latency files (-l/-q/-z) from the rows btt's own pairing gives (engines/pairing/btt.py's BLAT), each written as
btt writes it: `NAME_MAJ,MIN_TYPE.dat` in the current directory, a line `"%lf %lf\\n"` (the row's time stamp and
the latency, in seconds from the trace's time zero) per row, in btt's order; a file per device and kind that
has rows (btt 1.2.0 makes none for a device without rows: a dm device's Q2C file but no D2C file)."""

from __future__ import annotations

import argparse
import sys
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ioscope.base import outfile
from ioscope.base.devices import kdev_split
from ioscope.engines.pairing import btt, bttavg, bttinput

SUFFIX = {btt.BL_D2C: "d2c", btt.BL_Q2C: "q2c", btt.BL_Q2D: "q2d"}


def dip_name(dev: int) -> str:
    """btt's name for a device without a device map (-M): "MAJ,MIN"."""
    ma, mi = kdev_split(dev)
    return f"{ma},{mi}"


def latency_lines(t: npt.NDArray[Any], v: npt.NDArray[Any]) -> str:
    """btt's latency_out() for rows of ns: "%lf %lf\\n" of each as a double divided by 1e9 (Python's fixed
    format rounds the double's exact value to 6 places, as glibc's printf does)."""
    ts = (t.astype(np.float64) / 1.0e9).tolist()
    vs = (v.astype(np.float64) / 1.0e9).tolist()
    return "".join(f"{a:f} {b:f}\n" for a, b in zip(ts, vs))


class LatencyFiles:
    """btt's -l/-q/-z files: one per (kind, device), opened at the device's first row, written as rows come
    (memory does not grow with the trace)."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names            # BL_* -> btt's NAME
        self.files: dict[tuple[int, int], IO[str]] = {}

    def _file(self, kind: int, dev: int) -> IO[str]:
        f = self.files.get((kind, dev))
        if f is None:
            path = f"{self.names[kind]}_{dip_name(dev)}_{SUFFIX[kind]}.dat"
            f = self.files[(kind, dev)] = outfile.open_private(path, "w", force=True)
        return f

    def __call__(self, rows: npt.NDArray[np.void], dev_of: list[int]) -> None:
        kinds, devs = rows["kind"], rows["dev"]
        for kind in self.names:
            mk = kinds == kind
            if not mk.any():
                continue
            for di in np.unique(devs[mk]).tolist():
                m = mk & (devs == di)
                self._file(kind, dev_of[di]).write(latency_lines(rows["t"][m], rows["v"][m]))

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.files = {}


def run(args: argparse.Namespace) -> int:
    from ioscope.capture.offline import open_source

    names = {k: n for k, n in ((btt.BL_D2C, args.d2c_latencies), (btt.BL_Q2C, args.q2c_latencies),
                               (btt.BL_Q2D, args.q2d_latencies)) if n}
    files = LatencyFiles(names) if names else None
    src = open_source(args.input_file)
    with src:
        try:
            res = bttinput.analyse(src, args.input_file,
                                   lambda line: print(f"ioscope btt: note: {line}", file=sys.stderr),
                                   on_btt_latency=files)
        finally:
            if files is not None:
                files.close()
    view = res.btt if res.btt is not None else bttavg.empty_view(res.time_zero)
    text = "\n".join(bttavg.render_btt(bttavg.build_tables(view), all_data=args.all_data)) + "\n"
    if args.output:
        with outfile.open_private(f"{args.output}.avg", "w", force=True) as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
