"""Process names that change during a capture (exec, prctl): report and snoop name each I/O as it was
named when queued. Synthetic event arrays; the live test is test_comm_exec.py."""

from __future__ import annotations

import numpy as np

import blk_scenarios as bs
from ioscope.capture.blktrace import process_notes
from ioscope.capture.events import join_events
from ioscope.engines.pairing import btt
from ioscope.tools.snoop.snooper import Snooper

PID = 4242


def _shell_then_dd(n_sh: int, n_dd: int) -> np.ndarray:
    """A pid that queues n_sh reads as "sh", then (a note at its exec) n_dd reads as "dd"."""
    s = bs.Scenario()
    t = 1_000_000
    for i in range(n_sh):
        s.io(t + i * 100_000, 8 * i, 4096, pid=PID)
    t_exec = t + n_sh * 100_000
    for i in range(n_dd):
        s.io(t_exec + i * 100_000, 8 * (n_sh + i), 4096, pid=PID)
    notes = [process_notes({PID: name}, [PID], bs.LOOP0, 0, ts) for name, ts in (("sh", t), ("dd", t_exec))]
    ev = join_events([*notes, s.events()])   # a note goes before the event it names, as the recorder writes it
    return ev[np.argsort(ev["ts"], kind="stable")]


def test_report_counts_each_io_under_the_name_it_was_queued_under() -> None:
    ev = _shell_then_dd(3, 11)
    for comms in ({}, {PID: "dd"}):   # a capture header holds a pid's last name
        r = btt.analyse([ev], comms)
        q2c = {name: s.n for (ph, name), s in r.proc_stats.items() if ph == "q2c"}
        assert q2c == {"sh": 3, "dd": 11}, q2c


def test_report_one_chunk_per_event() -> None:
    ev = _shell_then_dd(2, 5)
    r = btt.analyse([ev[i:i + 1] for i in range(len(ev))], {})
    assert {name: s.n for (ph, name), s in r.proc_stats.items() if ph == "q2c"} == {"sh": 2, "dd": 5}


def test_snoop_names_by_queue_time() -> None:
    sn = Snooper.__new__(Snooper)
    sn.comms = {}
    ev = _shell_then_dd(1, 1)
    sn.note_comms(ev[ev["action"] == 0])
    t_sh, t_dd = (int(t) for t in ev["ts"][ev["action"] == 0])
    got = [sn.comm_at(PID, t) for t in (t_sh, t_sh + 1, t_dd - 1, t_dd, t_dd + 10**9)]
    assert got == ["sh", "sh", "sh", "dd", "dd"]
    assert sn.comm_at(PID + 1, t_dd) == "?"
