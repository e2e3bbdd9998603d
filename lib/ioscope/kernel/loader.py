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

Where a kernel lacks a tracepoint, a hook may fall back to the kernel function
the tracepoint sits in: ``fn_<hook>`` programs in ``fentry/<function>`` or
``fexit/<function>`` sections (variant "fentry", the last choice). A hook may
name several functions (``fn_<hook>``, then ``fn_<hook>__<alt>`` in order);
the first one the kernel's BTF has and that an fentry probe can attach to is
used. Lockdown (this project's own 6.18 VM), no BTF, or no ftrace direct calls
refuse the probe, and the hook is then unavailable like a missing tracepoint.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from ioscope.base import system
from ioscope.base.errors import IoscopeError, UsageError

try:
    from ioscope.kernel import _libbpf
except ImportError as _exc:  # pragma: no cover - broken installs only
    raise IoscopeError(f"the ioscope.kernel._libbpf extension is not built ({_exc})",
                       "reinstall ioscope: pip install . (needs libbpf-dev, pkg-config and clang)") from None

OBJ_DIR = Path(__file__).resolve().parent.parent / "bpfobj"
MAX_FILTER_DISKS = 256  # IOS_MAX_FILTER_DISKS, bpf/devfilter.bpf.h: -d in every tool
VARIANTS = ("tp_btf", "raw_tp", "tracepoint", "fentry")
PREFIX = {"tp_btf": "btf_", "raw_tp": "raw_", "tracepoint": "tp_", "fentry": "fn_"}
FUNCTION_SECTIONS = ("fentry", "fexit")  # the sections of the "fentry" variant's programs
# maperr.bpf.h: failed map operations, by operation and error (enum ios_maperr in bpf/ioscope.h)
MAPERR_OPS = ("update", "delete")
MAPERR_CLASSES = ("E2BIG", "ENOMEM", "EBUSY", "ENOENT", "EEXIST", "other")
MAPERR_LAST_OTHER = 12  # IOS_MAPERR_LAST_OTHER: the errno of the last "other" failure
NO_PREALLOC = 1  # BPF_F_NO_PREALLOC
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
    functions: list[tuple[str, str]] = field(default_factory=list)  # (fn_ program, kernel function), in order
    chosen: str | None = None  # variant
    prog: str | None = None    # the program chosen (of the variant, for this kernel's signature)


def _core_btf_without_admin() -> str | None:
    """The running kernel's BTF named explicitly when this process lacks CAP_SYS_ADMIN (CAP_BPF and
    CAP_PERFMON only, as the exporter's unit runs it): a CO-RE relocation with no candidate in vmlinux
    (a flavour of a renamed type, e.g. enum req_opf___old on 6.0+) makes libbpf look in the kernel
    modules' BTF, and listing BTF objects needs CAP_SYS_ADMIN (libbpf 1.1 fails the load: "failed to
    iterate BTF objects: -1"). With the BTF given, libbpf does not look in modules; the block layer's
    types are all in vmlinux."""
    if system.effective_caps() >> system.CAP_SYS_ADMIN & 1 or not os.path.isfile(system.DEFAULT_BTF):
        return None
    return system.DEFAULT_BTF


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
            self.obj = _libbpf.Object(str(path), btf_path=btf or _core_btf_without_admin())
        except _libbpf.BPFError as exc:
            raise IoscopeError(str(exc), _hint(exc.errno)) from None
        self.hooks: dict[str, Hook] = {}
        self._filter_devs: list[int] = []
        self.unavailable: list[str] = []
        self.attached: list[str] = []
        self.deferred: set[str] = set()  # hooks attached later, when needed (variant_summary leaves them out)
        self.preallocated: list[str] = []  # maps preallocated on this kernel (see _prealloc_where_needed)
        self._signatures: dict[str, list[str] | None] = {}
        for prog, section, _auto in self.obj.programs():
            kind, _, rest = section.partition("/")
            if kind in FUNCTION_SECTIONS and prog.startswith(PREFIX["fentry"]):
                hook, _, alt = prog[len(PREFIX["fentry"]):].partition("__")
                h = self.hooks.setdefault(hook, Hook(hook, "", ""))
                h.functions.insert(len(h.functions) if alt else 0, (prog, rest))
                h.variants["fentry"] = h.functions[0][0]
                continue
            for variant, prefix in PREFIX.items():
                if kind == variant and prog.startswith(prefix):
                    hook, _, alt = prog[len(prefix):].partition("__")
                    tp = rest.split("/")[-1]
                    cat = rest.split("/")[0] if variant == "tracepoint" else _category_of(tp)
                    h = self.hooks.setdefault(hook, Hook(hook, tp, cat))
                    h.tracepoint, h.category = tp, cat
                    if alt == "q":
                        h.queue_first[variant] = prog
                    elif not alt:
                        h.variants[variant] = prog

    # -- choosing -------------------------------------------------------

    def _function(self, h: Hook) -> tuple[str, str] | None:
        """The hook's first (program, kernel function) that an fentry probe attaches to here."""
        if self.btf:  # BTF from a file: the kernel has none of its own, and fentry needs it
            return None
        for prog, fn in h.functions:
            if fentry_error(fn) == 0:
                return prog, fn
        return None

    def _kernel_offers(self, variant: str, h: Hook) -> bool:
        if variant == "fentry":
            return self._function(h) is not None
        if not h.tracepoint:
            return False
        if variant == "tp_btf":
            return bool(_libbpf.tp_params(h.tracepoint, self.btf) >= 0)
        if variant == "tracepoint":
            # a classic tracepoint's program is attached by its id in tracefs: a process with the BPF
            # capabilities but not root cannot read it (lat's throttle hooks then stay unavailable, and
            # the tool says so where it matters), so tracefs refusing it means the variant is not ours
            try:
                return system.tracepoint_exists(h.category, h.tracepoint, system.ensure_tracefs())
            except (OSError, IoscopeError):
                return False
        try:
            return system.tracepoint_exists(h.category, h.tracepoint, system.ensure_tracefs())
        except (OSError, IoscopeError):
            # tracefs not readable (the BPF capabilities without root): a raw_tp program attaches by the
            # tracepoint's name, without tracefs; the kernel's BTF says whether the tracepoint exists
            return bool(_libbpf.tp_params(h.tracepoint, self.btf) >= 0)

    def tp_param_types(self, tracepoint: str) -> list[str] | None:
        """The C types of a tracepoint's arguments in this kernel's BTF, None without BTF for it."""
        if tracepoint not in self._signatures:
            self._signatures[tracepoint] = _libbpf.tp_param_types(tracepoint, self.btf)
        return self._signatures[tracepoint]

    def func_param_types(self, function: str) -> list[str] | None:
        """The C types of a kernel function's parameters in this kernel's BTF, None without it."""
        key = f"func:{function}"
        if key not in self._signatures:
            self._signatures[key] = _libbpf.func_param_types(function, self.btf)
        return self._signatures[key]

    def _program(self, h: Hook, variant: str) -> str:
        """The variant's program for this kernel's signature of the tracepoint (or function)."""
        if variant == "fentry":
            found = self._function(h)
            assert found is not None
            return found[0]
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

    def need_kfunc(self, kfunc: str, hooks: Iterable[str], force: bool = False) -> None:
        """The tp_btf variants of these hooks call kfunc: where the kernel lacks it (bpf_rdonly_cast: before
        6.2), or with force, use their raw_tp variants."""
        if not force and _libbpf.has_type(kfunc, "func", self.btf):
            return
        self.demote(hooks, "raw_tp")

    def choose(self, required: Iterable[str], optional: Iterable[str] = ()) -> None:
        """Autoload the best variant of each wanted hook; every other program stays unloaded."""
        forced = os.environ.get("IOSCOPE_ATTACH")
        order = list(VARIANTS)
        if forced:
            if forced not in VARIANTS:
                raise IoscopeError(f"IOSCOPE_ATTACH={forced} is not one of {', '.join(VARIANTS)}")
            # the forced variant or a lower one where the hook has it, else the hook's best
            order = order[order.index(forced):] + order[:order.index(forced)]
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
                what = self.absent(h)
                if is_required:
                    raise IoscopeError(what, "ioscope cannot run this tool here")
                self.unavailable.append(what)

    def leave_out(self, hooks: Iterable[str]) -> None:
        """Load none of these hooks' programs (chosen, but not wanted after all: a twin the kernel's
        signature rules out, or a second way to the same figure)."""
        for name in hooks:
            h = self.hooks[name]
            if h.chosen:
                self._select(h, None)

    def absent(self, h: Hook) -> str:
        """Why no variant of the hook can run here, in one line."""
        parts = [f"tracepoint {h.category}:{h.tracepoint}" if h.tracepoint else ""]
        if h.functions:
            why = "the kernel's BTF is not its own" if self.btf else "; ".join(
                f"{fn}: {_fentry_reason(fentry_error(fn))}" for _prog, fn in h.functions)
            parts.append(f"fentry ({why})")
        return " and ".join(p for p in parts if p) + " not available on this kernel"

    def use_function(self, hook: str, prog: str) -> None:
        """Run the hook through this one of its fentry programs (one per signature of a function whose
        arguments changed between kernels: the caller matched it to func_param_types)."""
        h = self.hooks[hook]
        fn = dict(h.functions)[prog]
        if h.chosen != "fentry" or fentry_error(fn):
            raise IoscopeError(f"hook {hook} does not run through fentry on {fn} here")
        if h.prog:
            self.obj.set_autoload(h.prog, False)
        h.prog = prog
        self.obj.set_autoload(prog, True)

    def chosen_function(self, hook: str) -> str | None:
        """The kernel function the hook's fentry/fexit program attached to, None for a tracepoint."""
        h = self.hooks[hook]
        if h.chosen != "fentry" or not h.prog:
            return None
        return next(fn for prog, fn in h.functions if prog == h.prog)

    def variant_summary(self) -> str:
        """e.g. 'tp_btf' or 'tp_btf+raw_tp' when hooks differ; the hooks a tool attaches later, when
        needed (deferred: the throttle's), only once they are attached."""
        used = sorted({h.chosen for name, h in self.hooks.items()
                       if h.chosen and (name not in self.deferred or h.prog in self.attached)}, key=VARIANTS.index)
        return "+".join(used)

    # -- configuring ----------------------------------------------------

    def set_global(self, name: str, value: bool | int | tuple[int, ...], fmt: str) -> None:
        """Set a const volatile global; fmt is its struct format ('?', 'B', 'I', 'Q', '8Q' with a tuple, ...)."""
        try:
            self.obj.set_global(name, struct.pack("=" + fmt, *value) if isinstance(value, tuple)
                                else struct.pack("=" + fmt, value))
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

    def _prealloc_where_needed(self) -> None:
        """Kernels without BPF's own allocator (struct bpf_mem_alloc, 6.1 on) allocate a hash map's
        elements with kmalloc from inside the programs, which is unsafe in tracing context: 5.10 loads
        such a tracing program with a kernel WARN ("trace type BPF program uses run-time allocation",
        a tainted kernel). There every map is preallocated: more memory, no allocation in a program."""
        if _libbpf.has_type("bpf_mem_alloc", "struct", self.btf):
            return
        for name in self.obj.maps():
            flags = self.obj.map_flags(name)
            if flags & NO_PREALLOC:
                self.obj.set_map_flags(name, flags & ~NO_PREALLOC)
                self.preallocated.append(name)

    def load(self) -> None:
        """Create maps and load the chosen programs (nothing runs until attach)."""
        self._prealloc_where_needed()
        try:
            self.obj.load()
        except _libbpf.BPFError as exc:
            raise IoscopeError(str(exc), _hint(exc.errno)) from None
        if self._filter_devs:
            filt = self.obj.map("dev_filter")
            for dev in self._filter_devs:
                filt.update(struct.pack("=I", dev), b"\x01")

    def attach(self, hooks: Iterable[str] | None = None) -> None:
        """Attach the chosen programs of every hook but the deferred ones, or of the hooks named; each once."""
        for name, h in self.hooks.items():
            if not h.prog or (name not in hooks if hooks is not None else name in self.deferred):
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
        m = self.obj.map("map_errs")
        _kb, vb, n = m.dump(sum=True)
        vals = struct.unpack(f"={n}Q", vb[: 8 * n])
        out = {}
        for i, op in enumerate(MAPERR_OPS):
            for j, cls in enumerate(MAPERR_CLASSES):
                k = i * len(MAPERR_CLASSES) + j
                out[f"map_{op}_{cls}"] = int(vals[k]) if k < n else 0
        if n > MAPERR_LAST_OTHER and any(out[f"map_{op}_other"] for op in MAPERR_OPS):
            # which errno "other" was (the last one, on any CPU): named in lost_detail
            raw = m.lookup(struct.pack("=I", MAPERR_LAST_OTHER), sum=False) or b""
            errs = [e for e in struct.unpack(f"={len(raw) // 8}Q", raw) if e]
            if errs:
                out[f"map_error_other_errno_{max(errs)}"] = 1
        return out

    def detach(self) -> None:
        """Stop every program (destroy its link); maps and ring buffers stay readable until close()."""
        self.obj.detach()

    def close(self) -> None:
        """Detach every program and free the object. Safe to call twice."""
        self.obj.close()
        self.attached = []

    @contextlib.contextmanager
    def closed_on_error(self) -> Iterator[BPFObject]:
        """For a collector's set-up: if the block raises (a refused load, a Ctrl-C), the object is closed
        (whatever was attached detached) and the error goes on; else it stays open for its owner."""
        try:
            yield self
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> BPFObject:
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


_FENTRY: dict[str, int] = {}


def fentry_error(function: str) -> int:
    """0 when an fentry program can attach to the kernel function, else the errno that refused it
    (probed once per process and function: a program that returns at once, loaded and attached)."""
    if function not in _FENTRY:
        _FENTRY[function] = _libbpf.probe_fentry(function)
    return _FENTRY[function]


def _fentry_reason(err: int) -> str:
    if err == errno.ENOENT:
        return "not in the kernel's BTF (absent or inlined)"
    if err == errno.EPERM:
        return "refused (EPERM: kernel lockdown or missing privileges)"
    if err in (errno.ENOTSUP, 524):
        return "refused (this kernel cannot attach fentry programs)"
    return f"refused ({os.strerror(err)})"


_CATEGORIES = {"block_": "block", "page_cache_": "filemap", "mm_filemap_": "filemap", "sys_": "syscalls",
               "task_": "task", "io_uring_": "io_uring", "kmem_": "kmem", "sched_": "sched"}


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
