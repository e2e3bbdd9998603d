"""ioscope btt's files, as btt writes them in the current directory: the averages (engines/pairing/bttavg.py:
NAME.avg, or stdout), and the files engines/pairing/bttfiles.py formats from btt's own pairing: the messages
(NAME.msg, or stdout before the averages), the activity ranges (NAME.dat, or stdout after them), the request-size
histograms (NAME_qhist.dat, NAME_dhist.dat, with -o), the per-second counts (MAJ,MIN_iops_fp.dat,
MAJ,MIN_mbps_fp.dat, sys_*, on every run), the -l/-q/-z latency files and the files of -Q, -s, -m, -B, -u, -p,
-P, -L and -I."""

from __future__ import annotations

import argparse
import sys
from typing import IO

from ioscope.base import outfile
from ioscope.base.devices import kdev
from ioscope.base.errors import UsageError
from ioscope.engines.pairing import btt, bttavg, bttfiles, bttinput


def _open(path: str) -> IO[str]:
    return outfile.open_private(path, "w", force=True)


def run(args: argparse.Namespace) -> int:
    from ioscope.capture.offline import open_source

    names = {k: n for k, n in ((btt.BL_D2C, args.d2c_latencies), (btt.BL_Q2C, args.q2c_latencies),
                               (btt.BL_Q2D, args.q2d_latencies)) if n}
    window = None   # btt's -t/-T: a bound not given is btt's 0.0
    if args.time_start is not None or args.time_end is not None:
        window = (args.time_start or 0.0, args.time_end or 0.0)
    msgs = _open(f"{args.output}.msg") if args.output else sys.stdout
    extra = {opt: n for opt, n in (("Q", args.active_queue_depth), ("s", args.seeks), ("m", args.seeks_per_second),
                                   ("B", args.dump_blocknos), ("p", args.per_io_dump),
                                   ("P", args.per_io_trees), ("I", args.iostat)) if n}
    if args.periodic_latencies is not None and args.periodic_latencies > 0:   # btt: 0 or less, no files
        extra["L"] = str(args.periodic_latencies)
    files = bttfiles.RowFiles(_open, names, msgs, extra)
    src = open_source(args.input_file)
    try:
        with src:
            res = bttinput.analyse(src, args.input_file,
                                   lambda line: print(f"ioscope btt: note: {line}", file=sys.stderr),
                                   on_btt_rows=files, btt_latencies=bool(names), range_delta=args.range_delta,
                                   time_window=window,
                                   btt_extra=tuple(o in extra for o in "QsmBpP"),
                                   plat_freq=args.periodic_latencies if "L" in extra else 0.0,
                                   btt_iostat=args.iostat_interval if args.iostat else None)
        view = res.btt if res.btt is not None else bttavg.empty_view(res.time_zero)
        files.finish(view)
        if args.unplug_hist:   # btt's -u: a file per device it set up, written as it frees the device
            for d in view.devices:
                with _open(f"{args.unplug_hist}_{bttfiles.dip_name(d.dev)}.dat") as f:
                    f.write(bttfiles.unplug_hist_text(d.unplug_hist))
    finally:
        files.close()
        if msgs is not sys.stdout:
            msgs.close()
    n_devs = len(view.devices)
    devices = None if args.devices is None else [kdev(ma, mi) for ma, mi in args.devices]
    exes = None if args.exes is None else args.exes.split(",")
    try:
        view = bttavg.select(view, devices, exes)
    except KeyError as e:
        raise UsageError(f"btt's -D lists {bttfiles.dip_name(e.args[0])}, a device btt did not set up from this trace "
                         "(btt crashes on it)") from None
    text = "\n".join(bttavg.render_btt(bttavg.build_tables(view), all_data=args.all_data,
                                       per_process=args.exes != "")) + "\n"
    ranges = bttfiles.ranges_text(view, n_devs)
    if args.output:
        with _open(f"{args.output}.avg") as f:
            f.write(text)
        with _open(f"{args.output}_qhist.dat") as f:
            f.write(bttfiles.hist_text("Q", btt.hist_counts(view.qhist), title=True))
        with _open(f"{args.output}_dhist.dat") as f:
            f.write(bttfiles.hist_text("D", btt.hist_counts(view.dhist), title=False))
        with _open(f"{args.output}.dat") as f:
            f.write(ranges)
    else:
        sys.stdout.write(text)
        sys.stdout.write(ranges)
    return 0
