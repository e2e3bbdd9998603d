#!/usr/bin/env python3
"""Overhead of `ioscope web` beside `ioscope lat`, measured side by side in one run.

fio 4 KiB random reads, QD32, libaio, direct, on a tmpfs-backed loop device (scheduler none and
mq-deadline by default). In every round, in an order rotated from round to round: nothing attached;
`ioscope lat -D -O`; `ioscope web` (keys disk and op: the kernel's request stamps, one program per I/O,
as lat); `ioscope web --by comm` (per process: each bio followed from its queue event). While a web tool
runs, a poller asks its /data once a second, as the page does. Prints IOPS (median over rounds), the ratio
to the untraced baseline (and paired with each round's own baseline), and with --profile the BPF CPU time
per I/O of each tracer (kernel.bpf_stats_enabled). Run as root:
    python3 bench/web_overhead.py [--rounds N] [--seconds S] [--schedulers none,mq-deadline] [--profile]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import sys
import threading
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from ioscope.base.testbed import LoopDevice, run_fio
from lat_overhead import Tracer, profile


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WebTracer(Tracer):
    """ioscope web, with a poller of its /data once a second (what the page does)."""

    def __enter__(self) -> WebTracer:
        super().__enter__()
        m = re.search(r"at (http://[\d.]+:\d+/)", Path(self.tmp.name).read_text())
        assert m, Path(self.tmp.name).read_text()
        self.url = m[1] + "data"
        self.stop = threading.Event()
        self.polls = 0
        self.poller = threading.Thread(target=self._poll, daemon=True)
        self.poller.start()
        return self

    def _poll(self) -> None:
        since = 0
        while not self.stop.wait(1.0):
            with urllib.request.urlopen(f"{self.url}?since={since}", timeout=5) as r:
                import json
                since = json.loads(r.read())["seq"]
                self.polls += 1

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.poller.join(timeout=5)
        super().__exit__(*exc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--schedulers", default="none,mq-deadline")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/web_overhead.py: run as root (it loads BPF programs and makes loop devices)", file=sys.stderr)
        return 1
    ioscope = [sys.executable, "-m", "ioscope.cli"]
    for sched in args.schedulers.split(","):
        with LoopDevice(size_mb=1024, scheduler=sched) as dev:
            configs: list[tuple[str, Callable[[], AbstractContextManager[Any]]]] = [
                ("baseline", nullcontext),
                ("ioscope lat -D -O", lambda: Tracer("lat", [*ioscope, "lat", "-D", "-O"], "Tracing", "stderr")),
                ("ioscope web", lambda: WebTracer("web", [*ioscope, "web", "-d", dev.name, "--listen",
                                                          f"127.0.0.1:{free_port()}"], "Serving", "stderr")),
                ("ioscope web --by comm", lambda: WebTracer("web", [*ioscope, "web", "-d", dev.name, "--by", "comm",
                                                                    "--listen", f"127.0.0.1:{free_port()}"],
                                                            "Serving", "stderr")),
            ]
            results: dict[str, list[float]] = {name: [] for name, _ in configs}
            run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=1)  # warm-up
            for r in range(args.rounds):
                shift = r % len(configs)
                for name, make in configs[shift:] + configs[:shift]:
                    with make():
                        job = run_fio(dev.path, rw="randread", bs="4k", iodepth=32, runtime=args.seconds)
                    results[name].append(float(job["read"]["iops"]))
                print(f"{sched} round {r + 1}/{args.rounds}: "
                      + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in results.items()), file=sys.stderr)
            prof = {name: profile(dev, make, args.seconds) for name, make in configs if name != "baseline"} \
                if args.profile else {}
        base = results["baseline"]
        print(f"\nscheduler {sched}: fio 4KiB randread QD32, {args.rounds} rounds x {args.seconds:g} s, "
              "order rotated per round")
        print(f"{'configuration':<26}{'IOPS (median)':>15}{'ratio':>8}{'paired':>8}{'paired range':>15}"
              f"{'BPF ns/IO':>10}")
        for name, v in results.items():
            pr = [t / b for t, b in zip(v, base)]
            ns = prof.get(name, {}).get("bpf_ns_per_io")
            print(f"{name:<26}{statistics.median(v):>15,.0f}{statistics.median(v) / statistics.median(base):>8.3f}"
                  f"{statistics.median(pr):>8.3f}{f'{min(pr):.3f}-{max(pr):.3f}':>15}"
                  f"{(f'{ns:.0f}' if ns is not None else '-'):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
