"""Acceptance: a btrfs RAID1 across two loop disks, and which member carried the reads.

btrfs keeps both copies of every block and sends each process's reads to one mirror (chosen by its
pid: mirror pid % 2), so two readers with even pids load one disk while its twin idles: the
imbalance report's stacked-device view must show (issue 13, seed 002). As typed: mkfs.btrfs -d
raid1 -m raid1 on two loop disks, files written and synced, caches dropped, `ioscope record -d A
-d B` around two readers, Ctrl-C, `ioscope report` and `report --json`. Each member's I/Os and
bytes in the view equal its /proc/diskstats over the recording, the shares are those numbers over
their sum, and one member carried (nearly) all of it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from conftest import assert_counted, ioscope_cmd, run_ioscope, unreported_completions
from ioscope.base.testbed import LoopDevice

FILE_MB = 12
LABEL = "ioscope-r1"


def _even_pid_reader(path: str, parity: int = 0) -> subprocess.Popen[str]:
    """A reader of path whose pid is even (or odd: parity 1), waiting for a line on stdin: btrfs sends
    the reads of pid p to mirror p % 2, so two such readers load one member and leave its twin idle."""
    while True:
        p = subprocess.Popen(["sh", "-c", f'read _ && exec dd if="{path}" of=/dev/null bs=256k 2>/dev/null'],
                             stdin=subprocess.PIPE, text=True)
        if p.pid % 2 == parity:
            return p
        p.kill()
        p.wait()


def _unreported(cap: str, dev: LoopDevice) -> int:
    """The disk's completions that ran no BPF program, as the capture's completions check reports them:
    0 for a disk the check leaves out (it completed nothing while recording: the idle twin)."""
    from ioscope.capture.store import open_capture
    with open_capture(cap) as c:
        assert c.end is not None
        check = c.end["completions_check"]
    key = f"{dev.device.major},{dev.device.minor}"
    return unreported_completions(cap, dev.device.major, dev.device.minor) if key in check else 0


def test_btrfs_raid1_members_and_their_shares(live: None, tmp_path: Path) -> None:
    from ioscope.base.testbed import drop_caches

    mnt = tempfile.mkdtemp(prefix="ioscope-btrfs-")
    mounted = False
    try:
        with LoopDevice(size_mb=320) as a, LoopDevice(size_mb=320) as b:
            subprocess.run(["mkfs.btrfs", "-q", "-f", "-L", LABEL, "-d", "raid1", "-m", "raid1", a.path, b.path],
                           check=True, capture_output=True)
            subprocess.run(["mount", "-o", "noatime", a.path, mnt], check=True)
            mounted = True
            for n in (1, 2):
                subprocess.run(["dd", "if=/dev/urandom", f"of={mnt}/f{n}", "bs=1M", f"count={FILE_MB}"],
                               check=True, stderr=subprocess.DEVNULL)
            subprocess.run(["sync"], check=True)
            drop_caches()
            time.sleep(1)
            cap = str(tmp_path / "r1.ioscope")
            rec = subprocess.Popen(ioscope_cmd("record", "-d", a.name, "-d", b.name, "-o", cap),
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
            lat = subprocess.Popen(ioscope_cmd("lat", "-D", "-j", "-d", a.name, "-d", b.name), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
            top = subprocess.Popen(ioscope_cmd("top", "-j", "0.5"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
            try:
                assert rec.stderr is not None and lat.stderr is not None
                first = rec.stderr.readline()
                assert first.startswith("Recording block I/O events"), first + rec.stderr.read()
                assert lat.stderr.readline().startswith("Tracing"), lat.stderr.read()
                assert top.stdout is not None
                top_lines = [top.stdout.readline()]   # its first interval: it samples from now on
                da0, db0 = a.diskstats(), b.diskstats()
                readers = [_even_pid_reader(f"{mnt}/f{n}") for n in (1, 2)]
                for r in readers:   # both start reading now
                    assert r.stdin is not None
                    r.stdin.write("go\n")
                    r.stdin.close()
                assert all(r.wait(timeout=120) == 0 for r in readers)
                time.sleep(0.3)
                da1, db1 = a.diskstats(), b.diskstats()
                time.sleep(0.6)   # top's interval that holds the end of the reads
            finally:
                for p in (rec, lat, top):
                    os.killpg(p.pid, signal.SIGINT)
                _, err = rec.communicate(timeout=60)
                lat_out, lat_err = lat.communicate(timeout=60)
                top_out, top_err = top.communicate(timeout=60)
            assert rec.returncode == 0, err
            assert lat.returncode == 0, lat_err
            # the same reads again by two odd-pid readers: the other mirror; `ioscope diff` shows the shift
            drop_caches()
            cap2 = str(tmp_path / "r1-odd.ioscope")
            rec = subprocess.Popen(ioscope_cmd("record", "-d", a.name, "-d", b.name, "-o", cap2),
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
            try:
                assert rec.stderr is not None
                assert rec.stderr.readline().startswith("Recording block I/O events")
                readers = [_even_pid_reader(f"{mnt}/f{n}", parity=1) for n in (1, 2)]
                for r in readers:
                    assert r.stdin is not None
                    r.stdin.write("go\n")
                    r.stdin.close()
                assert all(r.wait(timeout=120) == 0 for r in readers)
                time.sleep(0.3)
            finally:
                os.killpg(rec.pid, signal.SIGINT)
                _, err = rec.communicate(timeout=60)
            assert rec.returncode == 0, err
            subprocess.run(["umount", mnt], check=True)
            mounted = False
            doc = json.loads(run_ioscope("report", "--json", cap, check=True).stdout)
            text = run_ioscope("report", cap, check=True).stdout
            (st,) = [s for s in doc["stacks"] if s["kind"] == "btrfs"]
            assert st["label"] == LABEL and st["source"] == "members"
            m = {x["name"]: x for x in st["members"]}
            assert set(m) == {a.name, b.name}
            want = {}
            # the completed I/Os: diskstats', less the completions that ran no BPF program, as many as the
            # capture's completions check reports for that disk (exact when none; the bytes exact only then)
            miss = {dev.name: _unreported(cap, dev) for dev in (a, b)}
            for dev, d0, d1 in ((a, da0, da1), (b, db0, db1)):
                n = (d1.reads - d0.reads) + (d1.writes - d0.writes)
                nbytes = ((d1.sectors_read - d0.sectors_read) + (d1.sectors_written - d0.sectors_written)) * 512
                want[dev.name] = (n, nbytes)
                if not miss[dev.name]:
                    assert (m[dev.name]["ios"], m[dev.name]["bytes"]) == want[dev.name], (dev.name, m[dev.name], d0, d1)
                else:
                    assert_counted(m[dev.name]["ios"], n, miss[dev.name])
                    assert m[dev.name]["bytes"] <= nbytes, (dev.name, m[dev.name], d0, d1, miss)
            total_b = sum(v[1] for v in want.values())
            assert total_b >= 2 * FILE_MB << 20   # every byte of both files was read from one mirror or the other
            # each share is the member's bytes over the members' (diskstats' bytes when nothing is missing)
            total_m = sum(x["bytes"] for x in m.values())
            for name, (_n, nbytes) in want.items():
                assert m[name]["share_bytes"] == m[name]["bytes"] / total_m, (name, m, total_m)
                if not any(miss.values()):
                    assert m[name]["share_bytes"] == nbytes / total_b
            # both readers on one mirror: one member carried (nearly) all of it, its twin idled
            assert max(x["share_bytes"] for x in m.values()) >= 0.95, m
            # lat -D, live, says the same: each member's requests (d2c counts) as diskstats counted them, less
            # the completions lat reports no program of its ran for (completion_unseen: bios whose address
            # came back, or still waiting beyond the kernel's in-flight count at its final report; with the
            # kernel's stamps, requests the kernel completed beyond those it ended). Its one report covers
            # both disks: each member may be short by at most that number, exact when it is 0
            (ldoc,) = [json.loads(ln) for ln in lat_out.splitlines() if ln.startswith("{")]
            (lst,) = [x for x in ldoc["stacks"] if x["kind"] == "btrfs"]
            assert lst["label"] == LABEL
            d2c = {x["disk"]: x["d2c_count"] for x in lst["members"]}
            assert set(d2c) == set(want), lst
            lat_unseen = int(ldoc["lost_detail"].get("completion_unseen", 0))
            for name, (n, _nbytes) in want.items():
                assert_counted(d2c[name], n, lat_unseen)
            # top's stacks panel (extras.stacks in its JSON): the kB each member moved, summed over its
            # intervals, is what diskstats counted (top samples /proc/diskstats itself), so the busy
            # member is the same
            assert top.returncode == 0, top_err
            kb = {a.name: 0.0, b.name: 0.0}
            for ln in top_lines + top_out.splitlines():
                if ln.startswith("{"):
                    snap = json.loads(ln)
                    (tst,) = [x for x in snap["extras"]["stacks"] if x["kind"] == "btrfs"]
                    for x in tst["members"]:
                        kb[x["disk"]] += x["kB_s"] * snap["interval_s"]
            for name, (_n, nbytes) in want.items():
                # top's JSON rounds kB_s to 3 decimals and interval_s to 6 (top/view.py): 1 kB covers the first summed
                # over the intervals, 0.1% the second
                assert abs(kb[name] - nbytes / 1024) <= 1 + 0.001 * nbytes / 1024, (name, kb, want)
            # diff of the two recordings: the members' shares of the bytes, each equal to its report's
            doc2 = json.loads(run_ioscope("report", "--json", cap2, check=True).stdout)
            (st2,) = [x for x in doc2["stacks"] if x["kind"] == "btrfs"]
            m2 = {x["name"]: x for x in st2["members"]}
            dj = json.loads(run_ioscope("diff", "-j", cap, cap2, check=True, timeout=120).stdout)
            shares = {x["member"]: (x["before"], x["after"]) for x in dj["members"] if x["stack"] == f"btrfs {LABEL}"}
            assert shares == {n: (m[n]["share_bytes"], m2[n]["share_bytes"]) for n in (a.name, b.name)}, shares
            busy = max(shares, key=lambda n: shares[n][0])
            assert shares[busy][0] >= 0.95 and shares[busy][1] <= 0.05, shares   # the load moved to the twin
            rows = [ln.split() for ln in text.splitlines()]
            assert ["btrfs", f"{LABEL}:", "each", "member's", "completed", "I/Os"] in rows
            assert any(r[:2] == [a.name, str(m[a.name]["ios"])] for r in rows), text
    finally:
        if mounted:
            subprocess.run(["umount", mnt], check=False)
        os.rmdir(mnt)
