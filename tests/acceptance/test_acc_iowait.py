"""A service blocked on I/O, as a user finds it: `ioscope top -b -j` and `ioscope agg -e 'sum(iowait) by
comm'` started in the background, a service (a process writing 8 KiB with fdatasync after each) in a
cgroup limited to 100 write IOPS, both tools stopped from a script with kill -INT. Both exit 0 and show
the service blocked most of its time: top's IO> and agg's sum of its waits at least what the limit imposes
(n / 100 s), and no more than the time it ran."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from conftest import PY, ioscope_cmd, json_lines
from ioscope.base.testbed import LoopFS
from iowait_util import WORKLOAD, limited

N = 150  # writes: 1.5 s at least under the limit


def test_a_service_blocked_on_io_shows_in_top_and_agg() -> None:
    with LoopFS(256) as fs, limited(fs.loop.device.majmin, "w", 100) as cg:
        top = subprocess.Popen(ioscope_cmd("top", "-b", "-j", "0.5"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
        agg = subprocess.Popen(ioscope_cmd("agg", "-j", "-e", "sum(iowait) by comm", "0.5"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert top.stdout is not None and agg.stderr is not None
            assert top.stdout.readline().startswith("{")
            assert agg.stderr.readline().startswith("Tracing")
            # the service, named walwriter (its comm), in the limited cgroup
            # the service: a process writing with fdatasync after each write (iowait_util.WORKLOAD), in the cgroup
            svc = subprocess.Popen(cg.shell("svc", f"{PY} -c '{WORKLOAD}' fsync {fs.path('wal.log')} {N}"),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            t0 = time.monotonic()
            assert svc.stdout is not None and svc.stdin is not None
            assert svc.stdout.readline().strip() == "done"
            ran_s = time.monotonic() - t0
            time.sleep(1.0)   # a report after its last wait
            for p in (top, agg):
                p.send_signal(signal.SIGINT)  # as `kill -INT` from a script
            top_out, top_err = top.communicate(timeout=60)
            agg_out, agg_err = agg.communicate(timeout=60)
            svc.stdin.close()
            svc.wait(timeout=30)
        finally:
            for p in (top, agg):
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert top.returncode == 0 and agg.returncode == 0, (top_err, agg_err)
    assert "Traceback" not in top_err + agg_err
    waited_top = sum(w["waited_s"] for d in json_lines(top_out) for w in d["waits"] if w["pid"] == svc.pid)
    # agg names processes: the service's own name, as /proc says it
    comm = next(w["comm"] for d in json_lines(top_out) for w in d["waits"] if w["pid"] == svc.pid)
    waited_agg = sum(r["sum"] for d in json_lines(agg_out) for a in d["aggs"] for r in a["rows"]
                     if r["keys"]["comm"] == comm) / 1e9
    least = N / 100 * 0.5
    assert least <= waited_top <= ran_s, (waited_top, ran_s)
    assert least <= waited_agg, (waited_agg, [json.dumps(d["aggs"]) for d in json_lines(agg_out)][-1:])
    assert max(w["io_pct"] for d in json_lines(top_out) for w in d["waits"] if w["pid"] == svc.pid) >= 50
