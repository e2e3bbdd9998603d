"""Life cycle of one BPF object: open, pick program variants, configure, load, attach, close.

Each kernel hook is implemented by up to three programs that differ only in
how they attach, named by prefix: ``btf_<hook>`` (tp_btf), ``raw_<hook>``
(raw_tp) and ``tp_<hook>`` (classic tracepoint). For every hook the loader
autoloads the best variant this kernel offers, decided from BTF (is there a
``btf_trace_<tracepoint>`` type?) and tracefs (does the event exist?), never
from the kernel version. A hook whose tracepoint does not exist is either an
error (required) or reported as unavailable and left out.

``IOSCOPE_ATTACH=raw_tp|tracepoint`` forces a lower variant (tests use it).

A tracepoint whose signature changed between kernels has one program per
signature, the older one named with a suffix: ``<prefix><hook>__q`` takes the
``struct request_queue *`` that Linux 5.10's block tracepoints still pass
first (block_bio_queue, block_rq_issue, block_split, ...; Christoph Hellwig's
series "remove the request_queue argument to the block_* tracepoints" took it
out in 5.11). Which one loads is read from the kernel's BTF (the
arguments of ``btf_trace_<tracepoint>``), as for the variants.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from ioscope import system
from ioscope.errors import IoscopeError, UsageError

try:
    from ioscope import _libbpf
except ImportError as _exc:  # pragma: no cover - broken installs only
    raise IoscopeError(f"the ioscope._libbpf extension is not built ({_exc})",
                       "reinstall ioscope: pip install . (needs libbpf-dev, pkg-config and clang)") from None

OBJ_DIR = Path(__file__).resolve().parent / "bpfobj"
MAX_FILTER_DISKS = 256  # IOS_MAX_FILTER_DISKS, bpf/devfilter.bpf.h: -d in every tool
VARIANTS = ("tp_btf", "raw_tp", "tracepoint")
PREFIX = {"tp_btf": "btf_", "raw_tp": "raw_", "tracepoint": "tp_"}
# maperr.bpf.h: failed map operations, by operation and error (enum ios_maperr in bpf/ioscope.h)
MAPERR_OPS = ("update", "delete")
MAPERR_CLASSES = ("E2BIG", "ENOMEM", "EBUSY", "ENOENT", "EEXIST", "other")
QUEUE_ARG = "struct request_queue *"  # the first argument of 5.10's block tracepoints (the __q programs)


def object_path(name: str) -> Path:
    return OBJ_DIR / f"{name}.bpf.o"


def _hint(err: int | None) -> str:
    if err == errno.EPERM:
        return "run as root; kernel lockdown or a seccomp/LSM policy may forbid this program type"
    if err == errno.ENOENT:
        return "this kernel lacks the hook; run with IOSCOPE_DEBUG=1 to see libbpf's log"
    if err == errno.EINVAL:
        return "the kernel refused the program; run with IOSCOPE_DEBUG=1 to see the verifier log"
    return "run with IOSCOPE_DEBUG=1 to see libbpf's log"


@dataclass
class Hook:
    name: str            # e.g. "bio_queue"
    tracepoint: str      # e.g. "block_bio_queue"
    category: str        # e.g. "block"
    variants: dict[str, str] = field(default_factory=dict)  # variant -> program name
    queue_first: dict[str, str] = field(default_factory=dict)  # variant -> its __q program (5.10 signature)
    chosen: str | None = None  # variant
    prog: str | None = None    # the program chosen (of the variant, for this kernel's signature)


class BPFObject:
    """A compiled BPF object with its programs chosen, loaded and attached."""

    def __init__(self, name: str, btf: str | None = None) -> None:
        path = object_path(name)
        if not path.is_file():
            raise IoscopeError(f"BPF object {path} is missing",
                               "reinstall ioscope (pip install .) so that the BPF programs are compiled")
        self.name = name
        self.btf = btf
        if os.environ.get("IOSCOPE_DEBUG"):
            _libbpf.set_verbose(True)
        try:
            self.obj = _libbpf.Object(str(path), btf_path=btf)
        except _libbpf.BPFError as exc:
            raise IoscopeError(str(exc), _hint(exc.errno)) from None
        self.hooks: dict[str, Hook] = {}
        self._filter_devs: list[int] = []
        self.unavailable: list[str] = []
        self.attached: list[str] = []
        self._signatures: dict[str, list[str] | None] = {}
        for prog, section, _auto in self.obj.programs():
            kind, _, rest = section.partition("/")
            for variant, prefix in PREFIX.items():
                if kind == variant and prog.startswith(prefix):
                    hook, _, alt = prog[len(prefix):].partition("__")
                    tp = rest.split("/")[-1]
                    cat = rest.split("/")[0] if variant == "tracepoint" else _category_of(tp)
                    h = self.hooks.setdefault(hook, Hook(hook, tp, cat))
                    if alt == "q":
                        h.queue_first[variant] = prog
                    elif not alt:
                        h.variants[variant] = prog

    # -- choosing -------------------------------------------------------

    def _kernel_offers(self, variant: str, h: Hook) -> bool:
        if variant == "tp_btf":
            return bool(_libbpf.tp_params(h.tracepoint, self.btf) >= 0)
        tracefs = system.ensure_tracefs()
        return system.tracepoint_exists(h.category, h.tracepoint, tracefs)

    def tp_param_types(self, tracepoint: str) -> list[str] | None:
        """The C types of a tracepoint's arguments in this kernel's BTF, None without BTF for it."""
        if tracepoint not in self._signatures:
            self._signatures[tracepoint] = _libbpf.tp_param_types(tracepoint, self.btf)
        return self._signatures[tracepoint]

    def _program(self, h: Hook, variant: str) -> str:
        """The variant's program for this kernel's signature of the tracepoint."""
        alt = h.queue_first.get(variant)
        if alt:
            params = self.tp_param_types(h.tracepoint)
            if params and params[0] == QUEUE_ARG:
                return alt
        return h.variants[variant]

    def _select(self, h: Hook, variant: str | None) -> None:
        if h.prog:
            self.obj.set_autoload(h.prog, False)
        h.chosen = variant
        h.prog = self._program(h, variant) if variant else None
        if h.prog:
            self.obj.set_autoload(h.prog, True)

    def demote(self, hooks: Iterable[str], variant: str = "raw_tp") -> None:
        """Use a lower variant for these hooks (their chosen one needs what this kernel lacks)."""
        for name in hooks:
            h = self.hooks[name]
            if h.chosen and h.chosen != variant and variant in h.variants:
                self._select(h, variant)

    def choose(self, required: Iterable[str], optional: Iterable[str] = ()) -> None:
        """Autoload the best variant of each wanted hook; every other program stays unloaded."""
        forced = os.environ.get("IOSCOPE_ATTACH")
        order = list(VARIANTS)
        if forced:
            if forced not in VARIANTS:
                raise IoscopeError(f"IOSCOPE_ATTACH={forced} is not one of {', '.join(VARIANTS)}")
            order = order[order.index(forced):]
        wanted = {name: True for name in required}
        wanted.update({name: False for name in optional if name not in wanted})
        for prog, _section, _auto in self.obj.programs():
            self.obj.set_autoload(prog, False)
        for name, is_required in wanted.items():
            h = self.hooks.get(name)
            if h is None:
                raise IoscopeError(f"BPF object {self.name} has no program for hook {name}")
            for variant in order:
                if variant in h.variants and self._kernel_offers(variant, h):
                    self._select(h, variant)
                    break
            else:
                what = f"tracepoint {h.category}:{h.tracepoint} is not available on this kernel"
                if is_required:
                    raise IoscopeError(what, "ioscope cannot run this tool here")
                self.unavailable.append(what)

    def variant_summary(self) -> str:
        """e.g. 'tp_btf' or 'tp_btf+raw_tp' when hooks differ."""
        used = sorted({h.chosen for h in self.hooks.values() if h.chosen}, key=VARIANTS.index)
        return "+".join(used)

    # -- configuring ----------------------------------------------------

    def set_global(self, name: str, value: bool | int, fmt: str) -> None:
        """Set a const volatile global; fmt is its struct format ('?', 'B', 'I', 'Q', ...)."""
        try:
            self.obj.set_global(name, struct.pack("=" + fmt, value))
        except _libbpf.BPFError as exc:
            raise IoscopeError(str(exc)) from None

    def filter_disks(self, devs: Iterable[int]) -> None:
        """-d: only these kernel dev_t values (bpf/devfilter.bpf.h). Call before load(), which fills the map."""
        self._filter_devs = sorted(set(devs))
        if len(self._filter_devs) > MAX_FILTER_DISKS:
            raise UsageError(f"-d was given {len(self._filter_devs)} disks; at most {MAX_FILTER_DISKS} can be "
                             "filtered in the kernel", "leave -d out to trace every disk")
        self.set_global("targ_filter_dev", bool(self._filter_devs), "?")

    def set_max_entries(self, map_name: str, n: int) -> None:
        self.obj.set_max_entries(map_name, n)

    def set_map_type(self, map_name: str, type_: int) -> None:
        self.obj.set_map_type(map_name, type_)

    # -- loading and attaching -----------------------------------------

    def load(self) -> None:
        """Create maps and load the chosen programs (nothing runs until attach)."""
        try:
            self.obj.load()
        except _libbpf.BPFError as exc:
            raise IoscopeError(str(exc), _hint(exc.errno)) from None
        if self._filter_devs:
            filt = self.obj.map("dev_filter")
            for dev in self._filter_devs:
                filt.update(struct.pack("=I", dev), b"\x01")

    def attach(self, hooks: Iterable[str] | None = None) -> None:
        """Attach the chosen programs of every hook, or of the hooks named; each once."""
        for name, h in self.hooks.items():
            if not h.prog or (hooks is not None and name not in hooks):
                continue
            prog = h.prog
            if prog in self.attached:
                continue
            try:
                self.obj.attach(prog)
            except _libbpf.BPFError as exc:
                raise IoscopeError(str(exc), _hint(exc.errno)) from None
            self.attached.append(prog)

    def map(self, name: str) -> _libbpf.Map:
        return self.obj.map(name)

    def recursion_misses(self) -> int:
        """Program runs the kernel skipped (another BPF program was running on that CPU)."""
        total = 0
        for prog in self.attached:
            total += int(self.obj.prog_info(prog)["recursion_misses"])
        return total

    def map_errors(self) -> dict[str, int]:
        """Map updates and deletes that failed in this object's programs, by error, since the load:
        {"map_update_EBUSY": n, ...} (every name, zeros included; {} for an object without the counters)."""
        if "map_errs" not in self.obj.maps():
            return {}
        _kb, vb, n = self.obj.map("map_errs").dump(sum=True)
        vals = struct.unpack(f"={n}Q", vb[: 8 * n])
        out = {}
        for i, op in enumerate(MAPERR_OPS):
            for j, cls in enumerate(MAPERR_CLASSES):
                k = i * len(MAPERR_CLASSES) + j
                out[f"map_{op}_{cls}"] = int(vals[k]) if k < n else 0
        return out

    def detach(self) -> None:
        """Stop every program (destroy its link); maps and ring buffers stay readable until close()."""
        self.obj.detach()

    def close(self) -> None:
        """Detach every program and free the object. Safe to call twice."""
        self.obj.close()
        self.attached = []

    def __enter__(self) -> BPFObject:
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


_CATEGORIES = {"block_": "block", "page_cache_": "filemap", "mm_filemap_": "filemap", "sys_": "syscalls",
               "task_": "task"}


def _category_of(tp: str) -> str:
    """tracefs category of a tracepoint used with tp_btf/raw_tp sections."""
    if tp in ("sys_enter", "sys_exit"):
        return "raw_syscalls"
    if tp.startswith("page_cache_"):
        return "readahead" if system.tracepoint_exists("readahead", tp) else "filemap"
    for prefix, cat in _CATEGORIES.items():
        if tp.startswith(prefix):
            return cat
    return "block"
