"""The live agg collector: the agg BPF object, configured from the expressions, read (and cleared)
into one AggSample per interval."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ioscope.base import cgroups, devices
from ioscope.base.collector import Tick
from ioscope.base.errors import IoscopeError
from ioscope.base.losses import PENDING, Losses, StatsDelta
from ioscope.engines.aggregate import abi, names
from ioscope.engines.aggregate.expr import CMP_CODES, Expr, Insn, compile_cond
from ioscope.engines.aggregate.model import (
    AggSample,
    Linear,
    RawRow,
    Scalar,
    Stat,
    hist_from_counts,
    key_mask,
)
from ioscope.kernel import abi as core_abi
from ioscope.kernel.inflight import EXPLAIN, SETTLE_S, SlotTable
from ioscope.kernel.iowait import EXPLAIN as IOWAIT_EXPLAIN
from ioscope.kernel.iowait import HOOKS as IOWAIT_HOOKS
from ioscope.kernel.iowait import LOST as IOWAIT_LOST
from ioscope.kernel.iowait import SwapGate, set_swapin_functions
from ioscope.kernel.loader import BPFObject
from ioscope.kernel.stamps import LOSS_EXPLAIN, StampTiming

# agg's timings: the stamps' and the probes' (stamps.TIMINGS), and records made when each bio is queued
TIMINGS = ("auto", "stamps", "queue", "probes")
AT_QUEUE = "at queue"



@dataclass
class AggOptions:
    exprs: list[Expr]
    disks: list[devices.BlockDevice] = field(default_factory=list)
    pid: int | None = None
    cgroup: str | None = None
    btf: str | None = None
    programs: list[list[Insn]] | None = None  # the WHERE programs, compiled by the command (or here)
    timing: str = "auto"  # TIMINGS: auto times from the kernel's request stamps, or records at queue, where it can


def programs(exprs: Sequence[Expr]) -> list[list[Insn]]:
    """Each expression's WHERE program, its strings resolved on this system."""
    return [compile_cond(w, names.resolve) if (w := e.kernel_where) is not None else [] for e in exprs]


# what a request knows at its completion: the only fields the kernel-stamp timing can fill
REQUEST_FIELDS = ("disk", "op", "flags", "size", "bytes", "q2c", "q2d", "d2c")


def request_level(exprs: Sequence[Expr]) -> bool:
    """Every expression reads only REQUEST_FIELDS (keys, value and WHERE): it can run on the
    completion program alone, from the kernel's stamps (bpf/stamps.bpf.h)."""
    allowed = sum(1 << abi.FIELDS[f] for f in REQUEST_FIELDS)
    return not needed_fields(exprs) & ~allowed


# what a completion or an issue adds: an expression that reads none of these can be answered at queue
COMPLETION_FIELDS = ("q2c", "q2d", "d2c", "inflight")


def queue_level(exprs: Sequence[Expr]) -> bool:
    """No expression reads a time or the in-flight count: each bio can be recorded when it is queued,
    by the queue program alone (bpf/agg.bpf.c: agg_at_queue)."""
    return not needed_fields(exprs) & sum(1 << abi.FIELDS[f] for f in COMPLETION_FIELDS)


def needed_fields(exprs: Sequence[Expr], source: int = abi.SRC_IO) -> int:
    """targ_need (targ_wait_need for source SRC_WAIT): a bit per kernel field some expression of source
    reads (comm: its name words)."""
    need = 0
    for e in exprs:
        if (abi.SRC_WAIT if e.on_waits else abi.SRC_IO) != source:
            continue
        for f in e.fields():
            need |= 1 << abi.FIELDS["comm0" if f == "comm" else f]
    return need


def config_arrays(exprs: Sequence[Expr], progs: Sequence[list[Insn]]) -> tuple[np.ndarray, np.ndarray]:
    """targ_exprs and targ_insns, as the kernel reads them."""
    ex = np.zeros(abi.MAX_EXPRS, dtype=abi.EXPR)
    ins = np.zeros(abi.MAX_INSNS, dtype=abi.INSN)
    pos = 0
    for i, (e, prog) in enumerate(zip(exprs, progs)):
        ex[i]["key_mask"] = key_mask(e)
        ex[i]["value"] = abi.FIELDS[e.value] if e.value else abi.VALUE_COUNT
        ex[i]["kind"] = abi.K_LINEAR if e.func == "lquantize" else abi.K_LOGLIN if e.is_hist else abi.K_SCALAR
        ex[i]["source"] = abi.SRC_WAIT if e.on_waits else abi.SRC_IO
        if e.lq:
            low, high, step = e.lq
            ex[i]["lq_low"], ex[i]["lq_step"], ex[i]["lq_n"] = low, step, -(-(high - low) // step)
        ex[i]["insn_start"], ex[i]["ninsns"] = pos, len(prog)
        for ins_ in prog:
            ins[pos]["op"] = ins_.op
            ins[pos]["field"] = abi.FIELDS[ins_.field] if ins_.field else 0
            ins[pos]["cmp"] = CMP_CODES[ins_.cmp]
            ins[pos]["imm"] = ins_.imm & 0xFFFF_FFFF_FFFF_FFFF
            pos += 1
    return ex, ins


class LiveNamer:
    def __init__(self, comms: dict[int, str], stacks: Any = None) -> None:
        self.devs = devices.DevNames()
        self.cgroups = cgroups.CgroupNames()
        self.comms = comms
        self.stacks = stacks          # the stacks map (a _libbpf.Map), when kstack is used
        self.syms = names.KernelSymbols()
        self.usyms = names.UserSymbols()
        self._stack_names: dict[int, str] = {}
        self._ustack_names: dict[tuple[int, int], str] = {}
        self.files: Any = None        # the files map, when file is used
        self._mounts: dict[int, str] | None = None

    def file(self, ip: int) -> str:
        raw = self.files.lookup(np.uint64(ip).tobytes()) if self.files is not None else None
        if raw is None:
            return "[file name gone]"
        if self._mounts is None:
            self._mounts = names.mount_points()
        return names.file_path(np.frombuffer(raw, dtype=abi.FILE)[0], self._mounts)

    def kstack(self, sid: int) -> str:
        if sid in self._stack_names:
            return self._stack_names[sid]
        raw = self.stacks.lookup(np.uint32(sid).tobytes()) if self.stacks is not None else None
        if raw is None:
            return "[stack gone]"
        text = names.stack_text(np.frombuffer(raw, dtype=np.uint64).tolist(), self.syms)
        self._stack_names[sid] = text
        return text

    def ustack(self, sid: int, tgid: int) -> str:
        if (sid, tgid) in self._ustack_names:
            return self._ustack_names[sid, tgid]
        raw = self.stacks.lookup(np.uint32(sid).tobytes()) if self.stacks is not None else None
        if raw is None:
            return "[stack gone]"
        text = names.ustack_text(np.frombuffer(raw, dtype=np.uint64).tolist(), tgid, self.usyms)
        self._ustack_names[sid, tgid] = text
        return text

    def new_interval(self) -> None:
        """Processes exit and map new files: user stacks are named afresh in every interval."""
        self.usyms.forget_processes()
        self._ustack_names.clear()

    def disk(self, dev: int) -> str:
        return self.devs.name(dev)

    def comm(self, tgid: int) -> str:
        return self.comms.get(tgid, "[unknown]")

    def cgroup(self, cg: int) -> str:
        return self.cgroups.name(cg)


class AggCollector:
    """Owns the agg BPF object; sample() returns the rows since the last reset."""

    def __init__(self, opts: AggOptions) -> None:
        self.opts = opts
        self.progs = opts.programs if opts.programs is not None else programs(opts.exprs)
        self.cgroup = cgroups.cgroup_filter(opts.cgroup) if opts.cgroup else None
        self.bpf = BPFObject("agg", btf=opts.btf)
        self._namer = LiveNamer({})
        self.stamps: StampTiming | None = None  # the I/O's timing (None: every expression reads iowait)
        self.swap_gate: SwapGate | None = None  # an expression reads swapin: the stack is read at each wait
        self._no_swapin: str | None = None
        with self.bpf.closed_on_error():
            self._setup()

    def _setup(self) -> None:
        o, b = self.opts, self.bpf
        need = needed_fields(o.exprs)
        # expressions that read iowait are answered from the threads' I/O waits (the scheduler's two
        # programs, attached only for them); the others from the I/O (the block programs, only for them)
        wait_need = needed_fields(o.exprs, abi.SRC_WAIT)
        waits = [*IOWAIT_HOOKS] if any(e.on_waits for e in o.exprs) else []
        b.set_global("targ_waits", bool(waits), "?")
        b.set_global("targ_wait_need", wait_need, "I")
        b.set_max_entries("iowait_tids", 1)  # top's totals: agg adds each wait to its expressions instead
        # swap-ins told from the other waits (a stack read at each wait while swap is in use) only for swapin
        self.swapin = bool(wait_need & (1 << abi.FIELDS["swapin"]))
        if self.swapin:
            self._no_swapin = set_swapin_functions(b)
        self.issue_stamped = False
        if all(e.on_waits for e in o.exprs):
            self._setup_waits_only(need | wait_need)
            return
        # the issue program only when an expression reads what it measures: a request's issue time
        # (q2d, d2c) or the disk's in-flight count; count() by comm,disk runs two programs per I/O
        issue = bool(need & sum(1 << abi.FIELDS[f] for f in ("q2d", "d2c", "inflight")))
        self.issue_stamped = issue   # the slots' d_ns is each request's issue (else it stays 0)
        # the kernel's stamps carry no process, cgroup or queue-time detail, and no -p/-c to filter on
        stamps = o.timing in ("auto", "stamps") and request_level(o.exprs) and not o.pid and self.cgroup is None
        # else, with nothing read at issue or completion: every record made at queue, one program
        self.at_queue = not stamps and o.timing in ("auto", "queue") and queue_level(o.exprs)
        throttle = bool(need & (1 << abi.FIELDS["throttle"]))
        b.choose(required=["bio_queue", *([] if self.at_queue else ["rq_complete"]),
                           *(["rq_issue"] if issue else []), *waits],
                 optional=[*([] if self.at_queue else ["split"]), "task_rename", *(["throtl_add"] if throttle else [])])
        if throttle and not b.hooks["throtl_add"].chosen:
            raise IoscopeError(f"throttle needs {b.absent(b.hooks['throtl_add'])}",
                               "the cgroup key still says which cgroup throttled I/O was charged to; "
                               "docs/agg.md, 'throttle'")
        b.set_global("targ_throttle", throttle, "?")
        b.set_global("targ_stamps", stamps, "?")
        b.set_global("targ_at_queue", self.at_queue, "?")
        b.filter_disks(d.dev for d in o.disks)
        b.set_global("targ_tgid", o.pid or 0, "I")
        for name, (value, fmt) in (self.cgroup.bpf_globals() if self.cgroup else {}).items():
            b.set_global(name, value, fmt)
        b.set_global("targ_need", need, "I")
        b.set_global("targ_issue", issue, "?")
        if not (need | wait_need) & ((1 << abi.FIELDS["kstack"]) | (1 << abi.FIELDS["ustack"])):
            b.set_max_entries("stacks", 1)  # 8192 stacks x 1 KiB only when asked for
        if need & (1 << abi.FIELDS["file"]):   # direct I/O's file: its bio's end_io (bpf/agg.bpf.c)
            from ioscope.kernel.ksyms import kernel_function
            b.set_global("targ_dio_end_io", kernel_function("iomap_dio_bio_end_io"), "Q")
        if not need & (1 << abi.FIELDS["file"]):
            b.set_max_entries("files", 1)
        self._load()
        disks = [d.name for d in o.disks] or [d.name for d in devices.list_disks()]
        self.mq_disks = [n for n in disks if devices.is_mq(n)]
        self.stamps = StampTiming(b, devices.DevNames(), self.mq_disks, o.timing, stamps, o.btf)
        if self.at_queue:
            self.stamps.timing = {n: AT_QUEUE for n in self.stamps.timing}
            b.attach()
            return
        self.stamps.attach("rq_complete", ["bio_queue", "rq_issue", "split", "task_rename", *waits])

    def _setup_waits_only(self, need: int) -> None:
        """Every expression reads iowait: the scheduler's programs alone, no block program."""
        o, b = self.opts, self.bpf
        self.at_queue = False
        self.stamps = None
        self.mq_disks = []
        b.choose(required=[*IOWAIT_HOOKS], optional=["task_rename"])
        b.set_global("targ_tgid", o.pid or 0, "I")
        for name, (value, fmt) in (self.cgroup.bpf_globals() if self.cgroup else {}).items():
            b.set_global(name, value, fmt)
        b.set_global("targ_need", 0, "I")
        if not need & ((1 << abi.FIELDS["kstack"]) | (1 << abi.FIELDS["ustack"])):
            b.set_max_entries("stacks", 1)
        b.set_max_entries("files", 1)
        self._load()
        b.attach()

    def _load(self) -> None:
        """The expressions into the object, loaded; its maps and losses."""
        o, b = self.opts, self.bpf
        b.set_global("targ_nexprs", len(o.exprs), "I")
        ex, ins = config_arrays(o.exprs, self.progs)
        b.obj.set_global("targ_exprs", ex.tobytes())
        b.obj.set_global("targ_insns", ins.tobytes())
        b.load()
        if self._no_swapin:
            b.unavailable.append(self._no_swapin)
        if self.swapin:
            self.swap_gate = SwapGate(b.map("iowait_swap_used"))
            self.swap_gate.check()
        self.aggs = b.map("aggs")
        self.hists = b.map("hists")
        self.comms = b.map("comms")
        self.slots = SlotTable(b.map("inflight"))
        self._namer.stacks = b.map("stacks")
        self._namer.files = b.map("files")
        stat_names = {**core_abi.STAT_NAMES, **abi.STAT_NAMES}
        loss = [core_abi.STAT_NAMES[i] for i in range(core_abi.NR_LOST_STATS)] + list(abi.LOSS_STATS)
        self.stats = StatsDelta(b, b.map("stats"), stat_names, core_abi.NR_STATS,
                                [*loss, "not_stamped", IOWAIT_LOST],
                                {"agg_map_full": "an aggregation map was full: rows not updated",
                                 "stack_lost": "a stack's bucket in the stacks map held another stack",
                                 **LOSS_EXPLAIN, **EXPLAIN, **IOWAIT_EXPLAIN})

    @property
    def timing(self) -> dict[str, str]:
        """Each traced blk-mq disk and how its records are made (stamps.STAMPS: one per request at its
        completion; AT_QUEUE: one per bio when queued; stamps.PROBES: one per bio at its completion);
        none when every expression is answered from I/O waits."""
        return self.stamps.timing if self.stamps is not None else {}

    def tick(self) -> None:
        """Housekeeping, every stamps.TICK_S: disks without stamps to the probes, stale slots swept, swap in
        use looked at (swapin)."""
        if self.swap_gate is not None:
            self.swap_gate.check()
        if self.stamps is None:
            return
        self.stamps.tick()
        # the slot table holds bios only where a disk is followed by the probes
        if self.slotted:
            self.slots.tick()

    @property
    def slotted(self) -> bool:
        """Some disk's bios are followed in the slot table from queue to completion (the probes)."""
        return self.stamps is not None and not self.at_queue and not self.stamps.stamps_only

    @property
    def unavailable(self) -> list[str]:
        return self.bpf.unavailable

    def read_raw(self, reset: bool) -> list[RawRow]:
        rows: list[RawRow] = []
        kb, vb, n = self.aggs.dump(sum=False, delete=reset)
        if n:
            keys = np.frombuffer(kb, dtype=abi.KEY, count=n)
            per = np.frombuffer(vb, dtype=abi.VAL, count=n * self.aggs.ncpus).reshape(n, self.aggs.ncpus)
            for k, cpus in zip(keys, per):
                rows.append(RawRow(int(k["expr"]), tuple(int(x) for x in k["k"]), _scalar(cpus)))
        kb, vb, n = self.hists.dump(sum=False, delete=reset)
        if n:
            keys = np.frombuffer(kb, dtype=abi.KEY, count=n)
            vals = core_abi.combine_percpu_hists(vb, n, self.hists.ncpus)[:, 0]
            for k, h in zip(keys, vals):
                e = int(k["expr"])
                rows.append(RawRow(e, tuple(int(x) for x in k["k"]), self._hist(e, h)))
        return rows

    def _hist(self, e: int, rec: np.void) -> Stat:
        count = int(rec["count"])
        mn = int(~np.uint64(rec["min_inv"])) if count else 0
        expr = self.opts.exprs[e] if e < len(self.opts.exprs) else None
        if expr is not None and expr.func == "lquantize" and expr.lq:
            low, high, step = expr.lq
            nb = -(-(high - low) // step)
            return Linear(low, step, nb, [int(c) for c in rec["slots"][: nb + 2]], count, int(rec["sum"]), mn,
                          int(rec["max"]))
        return hist_from_counts(rec["slots"], count, int(rec["sum"]), mn, int(rec["max"]))

    def sample(self, tick: Tick) -> AggSample:
        started, final = tick.started, tick.final
        wall = time.time()
        raw = self.read_raw(tick.reset)
        if any("comm" in e.keys or e.globs for e in self.opts.exprs):
            self._namer.comms = core_abi.comms_from_dump(*self.comms.dump())
        self._namer.new_interval()
        unresolved = self._namer.usyms.unresolved
        rows = names.name_rows(self.opts.exprs, raw, self._namer)
        losses, in_flight = self.losses(final)
        if any("ustack" in e.keys for e in self.opts.exprs):  # an explanation: such frames print as addresses
            losses.counters["ustack_frames_unresolved"] = self._namer.usyms.unresolved - unresolved
        return AggSample(wall, started, rows, losses, final, timing=dict(self.timing), kernel_in_flight=in_flight)

    def losses(self, final: bool = False) -> tuple[Losses, int]:
        """The losses since the last read and, where bios are followed, the requests the kernel has in
        flight now (0 elsewhere; final: after the bios pending now were given time to complete,
        inflight.SETTLE_S)."""
        losses = self.stats.read(True)
        losses.counters["stale"] = self.slots.take_stale()
        if not self.slotted:
            return losses, 0
        settle = SETTLE_S if final else 0.0
        losses.counters[PENDING], in_flight = self.slots.pending_and_kernel(self.mq_disks, settle_s=settle)
        return losses, in_flight

    def close(self) -> None:
        self.bpf.close()


def _scalar(cpus: np.ndarray) -> Scalar:
    """One row's per-CPU struct agg_val -> Scalar (the 128-bit sums of squares added as integers)."""
    count = int(cpus["count"].sum(dtype=np.uint64))
    sq = sum((int(h) << 64) | int(lo) for h, lo in zip(cpus["sq_hi"], cpus["sq_lo"]))
    used = cpus["count"] > 0
    mn = int(~np.uint64(cpus["min_inv"][used].max())) if used.any() else 0
    return Scalar(count, int(sum(int(x) for x in cpus["sum"])), mn, int(cpus["max"].max()), sq)


__all__ = [
    "AT_QUEUE",
    "COMPLETION_FIELDS",
    "REQUEST_FIELDS",
    "TIMINGS",
    "AggCollector",
    "AggOptions",
    "config_arrays",
    "needed_fields",
    "programs",
    "queue_level",
    "request_level",
]
