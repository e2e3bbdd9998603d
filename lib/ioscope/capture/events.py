"""The event record shared by the recorder, captures and every offline tool.

EVENT mirrors struct trace_event in bpf/trace_event.h (checked against BTF by
the ABI test). action/category use blktrace's codes, so the blktrace export
and import are field copies.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.base.fmt import comm_str

EVENT = np.dtype([
    ("ts", np.uint64),        # ns, CLOCK_MONOTONIC
    ("sector", np.uint64),
    ("aux", np.uint64),       # split: new sector; remap: source sector; unplug: count
    ("bytes", np.uint32),
    ("dev", np.uint32),       # kernel dev_t (major << 20 | minor)
    ("aux_dev", np.uint32),   # remap: source device
    ("pid", np.uint32),       # thread id
    ("tgid", np.uint32),
    ("cpu", np.uint16),
    ("error", np.uint16),
    ("action", np.uint16),    # BLK_TA_* code; 0 for notes
    ("category", np.uint16),  # BLK_TC_* bits
    ("flags", np.uint32),     # EV_* flags
])

# the structs this module mirrors (registry.ABI_MIRRORS: tests/test_abi.py checks them against BTF)
STRUCTS = {"trace_event": EVENT}
assert EVENT.itemsize == 56

# An event as 56 opaque bytes: numpy copies a structured dtype field by field, so joining or
# selecting EVENT arrays through this view is 15-20 times faster.
EVENT_RAW = np.dtype((np.void, EVENT.itemsize))


def join_events(parts: list[npt.NDArray[np.void]]) -> npt.NDArray[np.void]:
    """np.concatenate of EVENT arrays, done on their bytes."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p.view(EVENT_RAW) for p in parts]).view(EVENT)


def select_events(ev: npt.NDArray[np.void], which: npt.NDArray[Any] | slice) -> npt.NDArray[np.void]:
    """A copy of ev[which] (a boolean mask, indexes or a slice), done on the events' bytes."""
    raw = ev.view(EVENT_RAW)[which]
    out: npt.NDArray[np.void] = (raw.copy() if isinstance(which, slice) else raw).view(EVENT)
    return out

EV_NOTE_PROCESS = 1
# a blktrace message record (BLK_TN_MESSAGE): read from a blktrace file for btt's view only, never in a capture
EV_MESSAGE = 2
# a queue event whose aux is the id of the cgroup its bio is charged to (bpf/trace_event.h IOS_EV_CGROUP)
EV_CGROUP = 4

# blktrace action codes (low 16 bits of blk_io_trace.action)
TA_QUEUE, TA_BACKMERGE, TA_FRONTMERGE, TA_GETRQ, TA_SLEEPRQ, TA_REQUEUE, TA_ISSUE, TA_COMPLETE = 1, 2, 3, 4, 5, 6, 7, 8
TA_PLUG, TA_UNPLUG_IO, TA_UNPLUG_TIMER, TA_INSERT, TA_SPLIT, TA_BOUNCE, TA_REMAP, TA_ABORT, TA_DRV_DATA = (
    9, 10, 11, 12, 13, 14, 15, 16, 17)

# blkparse's action letters
ACTION_LETTERS = {
    TA_QUEUE: "Q", TA_BACKMERGE: "M", TA_FRONTMERGE: "F", TA_GETRQ: "G", TA_SLEEPRQ: "S", TA_REQUEUE: "R",
    TA_ISSUE: "D", TA_COMPLETE: "C", TA_PLUG: "P", TA_UNPLUG_IO: "U", TA_UNPLUG_TIMER: "UT", TA_INSERT: "I",
    TA_SPLIT: "X", TA_BOUNCE: "B", TA_REMAP: "A", TA_ABORT: "K", TA_DRV_DATA: "Z",
}

# blktrace category bits (high 16 bits of blk_io_trace.action, shifted down)
TC_READ, TC_WRITE, TC_FLUSH, TC_SYNC, TC_QUEUE, TC_REQUEUE, TC_ISSUE, TC_COMPLETE = (
    1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5, 1 << 6, 1 << 7)
TC_FS, TC_PC, TC_NOTIFY, TC_AHEAD, TC_META, TC_DISCARD, TC_DRV_DATA, TC_FUA = (
    1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14, 1 << 15)


def rwbs(category: int, nbytes: int) -> str:
    """blkparse's RWBS string (the one rwbs decoder): [F] D|W|R|N [F][A][S][M].

    R and N are told apart by size, as blkparse does: a read-side event with no
    data is N.
    """
    out = "F" if category & TC_FLUSH else ""
    if category & TC_DISCARD:
        out += "D"
    elif category & TC_WRITE:
        out += "W"
    elif nbytes:
        out += "R"
    else:
        out += "N"
    for bit, letter in ((TC_FUA, "F"), (TC_AHEAD, "A"), (TC_SYNC, "S"), (TC_META, "M")):
        if category & bit:
            out += letter
    return out


def note_comm(ev: np.void) -> str:
    """The command name carried by a process note (sector and aux hold its 16 bytes)."""
    raw = np.array([ev["sector"], ev["aux"]], dtype="<u8").tobytes()
    return comm_str(raw)


# the letters each action category of `record -a` records; the phases and the letters they need (report
# follows an I/O from its Q: every phase needs it)
MASK_LETTERS = {"queue": "QGIMFPUA", "requeue": "R", "issue": "D", "complete": "C"}
PHASE_LETTERS = {"Q2G": "QG", "G2I": "QGI", "Q2M": "QM", "I2D": "QID", "D2C": "QDC", "Q2D": "QD", "Q2C": "QC"}


def action_mask_note(path: str, mask: Any) -> str | None:
    """One line for a capture recorded with `record -a` (meta["action_mask"]): what it holds and which
    phases it cannot have (they are empty, not zero). None for a capture of every event."""
    if not isinstance(mask, dict) or mask.get("all", True):
        return None
    names = [str(n) for n in mask.get("names", [])]
    head = f"{path} was recorded with -a {','.join(names)}"
    directional = [n for n in names if n not in MASK_LETTERS and n != "notify"]
    if directional:
        also = "".join(MASK_LETTERS.get(n, "") for n in names)
        return (f"{head}: it holds only the events of {', '.join(directional)} I/O"
                f"{' and every ' + ' '.join(also) + ' event' if also else ''}; the numbers are about those alone")
    letters = "".join(MASK_LETTERS.get(n, "") for n in names)
    missing = [ph for ph, need in PHASE_LETTERS.items() if not all(c in letters for c in need)]
    return (f"{head}: it holds only {' '.join(letters) or 'process notes'} events; "
            f"{', '.join(missing) or 'no phase'} need{'s' if len(missing) == 1 else ''} others: "
            "their tables are empty, not zero")


class FirstNames:
    """The name blkparse and btt give each pid of a capture recorded by ioscope, reading its blktrace export:
    the export writes one process note per pid, before its first block event, with the name the pid had
    then (its last process note before that event, else the capture's table of names). blkparse and btt
    keep the first note they read for good, so that name is the pid's for the whole trace; a pid with no
    name gets no note (blkparse prints "(null)", btt calls it pid%09u)."""

    def __init__(self, comms: dict[int, str]) -> None:
        self.known = dict(comms)                  # the latest name of each pid so far
        self.fixed: dict[int, str | None] = {}    # each pid's name for good, from its first block event
        self._seen = np.zeros(1 << 16, dtype=bool)   # pids in fixed (most chunks bring no new one)

    def chunk(self, ev: npt.NDArray[np.void]) -> list[tuple[int, int, str | None]]:
        """(index of the pid's first block event in ev, pid, its name) for the pids first seen in ev, in
        order of those events; the chunk's process notes are then known."""
        flags = ev["flags"]
        pids = ev["pid"]
        special = (flags & (EV_NOTE_PROCESS | EV_MESSAGE)) != 0
        notes = np.flatnonzero((flags & EV_NOTE_PROCESS) != 0)
        top = int(pids.max()) if len(pids) else 0
        if top >= len(self._seen):
            grown = np.zeros(max(top + 1, 2 * len(self._seen)), dtype=bool)
            grown[:len(self._seen)] = self._seen
            self._seen = grown
        fresh = np.flatnonzero(~special & ~self._seen[pids])   # block events of pids not named for good yet
        out: list[tuple[int, int, str | None]] = []
        if len(fresh):
            upid, first = np.unique(pids[fresh], return_index=True)
            for pid, i in zip(upid.tolist(), first.tolist()):
                k = int(fresh[i])
                before = notes[(notes < k) & (pids[notes] == pid)]
                name = note_comm(ev[int(before[-1])]) if len(before) else self.known.get(pid)
                self.fixed[pid] = name
                self._seen[pid] = True
                out.append((k, int(pid), name))
        for k in notes.tolist():
            self.known[int(pids[k])] = note_comm(ev[k])
        out.sort()
        return out
