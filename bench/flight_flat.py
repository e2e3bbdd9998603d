#!/usr/bin/env python3
"""The flight recorder over a long run at full rate: do its memory and its files stay bounded?

fio 4 KiB random reads, QD32, libaio, direct, unthrottled, on a 1 GiB tmpfs-backed loop device for
--seconds (default 600), traced by `ioscope record --ring RING -d DISK -o PREFIX` (default --ring 20s,256M,
every event), asked to save its window with SIGUSR1 every --save-every seconds (default 120). Every --every
seconds (default 30) it samples the recorder's VmRSS (/proc/PID/status), the ring's own report (its status
line: seconds and bytes held, events seen) and the saved files' sizes. The table gives the first sample
(after warm-up), the last, the largest, and each save's size and events: memory should stay flat, each
saved file no larger than the ring's size. The saves go to --dir (default /dev/shm; removed at the end
unless --keep). Run as root:
    flock /tmp/ioscope-live.lock python3 bench/flight_flat.py [--seconds 600] [--every 30] [--ring 20s,256M]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lib"))

from ioscope.base.testbed import LoopDevice, fio_terse_read_iops
from rss_flat import rss_kib

SAVED = re.compile(r"saved (\S+): .*\(([\d.]+) s\); ([\d,]+) events, (.*?); lost (\d+)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--every", type=float, default=30.0)
    ap.add_argument("--save-every", type=float, default=120.0)
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds before the first sample (default 30: "
                    "the ring fills up first)")
    ap.add_argument("--ring", default="20s,256M")
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/flight_flat.py: run as root (BPF and loop devices)", file=sys.stderr)
        return 1
    out = tempfile.mkdtemp(prefix="ioscope-flight-", dir=args.dir)
    status: list[str] = []
    saved: list[str] = []
    try:
        with LoopDevice(size_mb=1024) as dev:
            # the status line every second: -q off, stderr not a terminal gives a line a minute; the test
            # reads the ring's state from the lines it prints at the end of each save and from its status lines
            p = subprocess.Popen([sys.executable, "-m", "ioscope.cli", "record", "--ring", args.ring, "-d", dev.name,
                                  "-o", f"{out}/flight", "--after", "2s", "--max-saves", "1000"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert p.stdout is not None and p.stderr is not None
            first = p.stderr.readline()
            if not first.startswith("Flight recorder"):
                raise SystemExit(f"record --ring failed: {first}{p.stderr.read()}")
            print(first.strip(), file=sys.stderr)

            def read(stream: object, into: list[str]) -> None:
                for line in stream:  # type: ignore[attr-defined]
                    into.append(line.rstrip("\n"))
            threads = [threading.Thread(target=read, args=(p.stderr, status), daemon=True),
                       threading.Thread(target=read, args=(p.stdout, saved), daemon=True)]
            for t in threads:
                t.start()
            fio = subprocess.Popen(["fio", "--name=flight", f"--filename={dev.path}", "--rw=randread", "--bs=4k",
                                    "--iodepth=32", "--ioengine=libaio", "--direct=1", "--time_based",
                                    f"--runtime={args.seconds + args.warmup}", "--output-format=terse"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            rss: list[int] = []
            t0 = time.monotonic()
            next_save = t0 + args.warmup + args.save_every / 2
            try:
                time.sleep(args.warmup)
                while True:
                    if p.poll() is not None:
                        raise SystemExit("record --ring exited early:\n" + "\n".join(status[-5:]))
                    rss.append(rss_kib(p.pid))
                    elapsed = time.monotonic() - t0 - args.warmup
                    files = sorted(Path(out).iterdir())
                    print(f"{elapsed:6.0f}s  VmRSS {rss[-1] / 1024:.1f} MiB  saves {len(files)}  "
                          f"files {sum(f.stat().st_size for f in files) / 2**20:.1f} MiB", file=sys.stderr, flush=True)
                    if elapsed >= args.seconds:
                        break
                    now = time.monotonic()
                    if now >= next_save:
                        p.send_signal(signal.SIGUSR1)
                        next_save = now + args.save_every
                    time.sleep(max(0.0, min(args.every, args.seconds - elapsed, next_save - time.monotonic())))
            finally:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
                p.wait(timeout=120)
                for t in threads:
                    t.join(10)
                fio.wait(timeout=120)
        iops = fio_terse_read_iops(fio.stdout.read() if fio.stdout else "")
        print(f"{args.seconds:g} s at full rate (fio {iops:,.0f} IOPS), record --ring {args.ring}, a save every "
              f"{args.save_every:g} s; VmRSS sampled every {args.every:g} s after {args.warmup:g} s of warm-up:")
        print(f"  VmRSS first {rss[0] / 1024:.1f} MiB, last {rss[-1] / 1024:.1f} MiB, max {max(rss) / 1024:.1f} MiB, "
              f"change {(rss[-1] - rss[0]) / 1024:+.1f} MiB over {len(rss)} samples")
        for line in saved:
            m = SAVED.search(line)
            if m:
                print(f"  save {Path(m[1]).name}: window {m[2]} s, {m[3]} events, {m[4]}, lost {m[5]}")
        summary = [ln for ln in status if ln.startswith("Flight recorder ran")]
        if summary:
            print(f"  {summary[-1]}")
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
