"""Redaction of a bundle: every hostname, address, process name (and cgroup name), path, user name or
serial of the classes asked for is replaced, in every file of the bundle (the capture included), by a
stable pseudonym: the same name gets the same token everywhere (`host-1`, `comm-3`, `path-2`, ...).
The mapping is never written.

Pure: the names to hide are learned from the context and the capture's process names (learn_*), then
applied to JSON (redact_json) and to process-note names (comm)."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CLASSES = ("hostnames", "addresses", "comms", "paths", "users", "serials")
PREFIX = {"hostnames": "host", "addresses": "addr", "comms": "comm", "paths": "path", "users": "user",
          "serials": "serial"}
# cgroup names every systemd host has: they name no service
COMMON_CGROUPS = frozenset({"system.slice", "user.slice", "init.scope", "machine.slice", "-.slice", "blkio", "io"})
IPV4_RE = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")
# where serials live in the context: sysfs device identity, lsblk's columns, blkid's tags
# (not labels: "root" or "boot" would be replaced wherever they stand as a word)
SERIAL_KEYS = frozenset({"serial", "wwid", "wwn", "uuid", "partuuid", "ptuuid", "UUID", "UUID_SUB", "PARTUUID",
                         "PTUUID"})
UUID_RE = re.compile(r"\b(?:PART)?UUID=([\w-]+)")
PF_KTHREAD = 0x00200000
# paths every Linux host has: hiding them hides nothing and makes the context unreadable
COMMON_PATHS = frozenset({"/", "/proc", "/sys", "/dev", "/run", "/tmp", "/boot", "/home", "/var", "/usr", "/etc",
                          "/dev/shm", "/dev/pts", "/dev/mqueue", "/sys/fs/cgroup", "/sys/kernel/tracing",
                          "/sys/kernel/debug", "/sys/fs/bpf", "/proc/sys/fs/binfmt_misc", "/dev/hugepages"})
ADDR_RE = re.compile(r"^[0-9a-fA-F:.]+$")


def parse_classes(text: str) -> tuple[str, ...]:
    from ioscope.base.errors import UsageError

    got = tuple(w.strip() for w in text.split(",") if w.strip())
    bad = [w for w in got if w not in CLASSES]
    if bad or not got:
        raise UsageError(f"--redact: unknown class {', '.join(repr(b) for b in bad) or '(none given)'}",
                         f"choose from {','.join(CLASSES)}")
    return got


@dataclass
class Redactor:
    classes: tuple[str, ...]
    names: dict[str, dict[str, str]] = field(default_factory=dict)   # class -> original -> token
    _pattern: re.Pattern[str] | None = None
    _lookup: dict[str, str] = field(default_factory=dict)

    def add(self, cls: str, original: str | None) -> None:
        if cls not in self.classes or not original or len(original) < 2:
            return
        tab = self.names.setdefault(cls, {})
        if original not in tab:
            tab[original] = f"{PREFIX[cls]}-{len(tab) + 1}"
            self._pattern = None

    def learn_context(self, ctx: dict[str, Any]) -> None:
        k = ctx.get("kernel") or {}
        for h in (k.get("hostname"), socket.gethostname(), socket.getfqdn()):
            self.add("hostnames", h)
            if h and "." in h:
                self.add("hostnames", h.split(".")[0])
        net = ctx.get("network")
        if isinstance(net, dict) and "absent" not in net:
            for link in net.values():
                mac = link.get("mac")
                if mac and mac != "00:00:00:00:00:00":
                    self.add("addresses", mac)
                for a in link.get("addresses") or []:
                    ip = a.split("/")[0]
                    if ip not in ("127.0.0.1", "::1"):
                        self.add("addresses", ip)
        mounts = ctx.get("mounts")
        if isinstance(mounts, list):
            for m in mounts:
                for p in (m.get("mount_point"), m.get("source")):
                    if p and p.startswith("/") and p not in COMMON_PATHS and not p.startswith(("/proc/", "/sys/")):
                        self.add("paths", p)
        for dev in (ctx.get("block_devices") or {}).values() if isinstance(ctx.get("block_devices"), dict) else []:
            bf = dev.get("loop_backing_file")
            if isinstance(bf, str) and bf.startswith("/"):
                self.add("paths", bf)
        self._learn_serials(ctx.get("block_devices"))
        self._learn_serials(ctx.get("storage"))
        # the kernel command line: its IPv4 addresses (ip=, nfsroot=) and UUIDs (root=UUID=...)
        cmdline = k.get("cmdline")
        if isinstance(cmdline, str):
            for ip in IPV4_RE.findall(cmdline):
                if not ip.startswith(("127.", "0.")):
                    self.add("addresses", ip)
            for u in UUID_RE.findall(cmdline):
                self.add("serials", u)
        log = ctx.get("kernel_log")
        if isinstance(log, dict):
            for ln in log.get("lines") or []:
                for ip in IPV4_RE.findall(ln):
                    if not ip.startswith(("127.", "0.")):
                        self.add("addresses", ip)
        # cgroup names (systemd unit and slice names name the services, as process names do)
        cg = ctx.get("cgroups")
        if isinstance(cg, dict):
            for h in cg.values():
                limits = h.get("limits") if isinstance(h, dict) else None
                for path in limits if isinstance(limits, dict) else []:
                    for part in path.strip("/").split("/"):
                        if part and part not in COMMON_CGROUPS and part != "...":
                            self.add("comms", part)
        try:
            import pwd
            for u in pwd.getpwall():
                if u.pw_uid >= 1000 and u.pw_name != "nobody":
                    self.add("users", u.pw_name)
                    if u.pw_dir not in COMMON_PATHS:
                        self.add("paths", u.pw_dir)
        except (ImportError, KeyError):
            pass

    def _learn_serials(self, v: Any) -> None:
        """Every value under a serial-like key (serial, wwid, wwn, UUIDs, labels) anywhere in v."""
        if isinstance(v, dict):
            for key, x in v.items():
                if key in SERIAL_KEYS and isinstance(x, str) and x.strip():
                    self.add("serials", x.strip())
                else:
                    self._learn_serials(x)
        elif isinstance(v, list):
            for x in v:
                self._learn_serials(x)

    def learn_paths(self, paths: Iterable[str]) -> None:
        for p in paths:
            self.add("paths", p)

    def learn_comms(self, comms: Iterable[str], keep: Iterable[str] = ()) -> None:
        """Process names to hide, but those in keep (kernel threads: kernel_threads()) and ioscope."""
        kept = set(keep)
        for c in comms:
            if c != "ioscope" and c not in kept:   # the recorder itself (its own writes, when it records every disk)
                self.add("comms", c)

    def _compiled(self) -> re.Pattern[str] | None:
        if self._pattern is None:
            self._lookup = {o: t for tab in self.names.values() for o, t in tab.items()}
            if not self._lookup:
                return None
            alts = sorted(self._lookup, key=len, reverse=True)
            # a name is replaced where it stands as a word or a path: not inside a longer word
            self._pattern = re.compile("|".join(rf"(?<![\w.-]){re.escape(a)}(?![\w-])" if not a.startswith("/")
                                                else rf"{re.escape(a)}(?![\w.-])" for a in alts))
        return self._pattern

    def text(self, s: str) -> str:
        pat = self._compiled()
        return pat.sub(lambda m: self._lookup[m.group(0)], s) if pat is not None else s

    def redact_json(self, v: Any, keys: bool = False) -> Any:
        """Every string value (and, with keys, every key) with the names replaced."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, list):
            return [self.redact_json(x, keys) for x in v]
        if isinstance(v, dict):
            return {(self.text(k) if keys else k): self.redact_json(x, keys) for k, x in v.items()}
        return v

    def context(self, ctx: dict[str, Any]) -> dict[str, Any]:
        """A context snapshot redacted; under "cgroups" the keys too (they are cgroup paths)."""
        out = {k: self.redact_json(v, keys=(k in ("cgroups", "network"))) for k, v in ctx.items()}
        return out

    def comm(self, name: str) -> str:
        return self.names.get("comms", {}).get(name, name)

    def summary(self) -> dict[str, int]:
        """How many names of each class were replaced (the names themselves are not kept)."""
        return {c: len(self.names.get(c, {})) for c in self.classes}


def kernel_thread_table(proc: str = "/proc") -> dict[int, str]:
    """{pid: name} of every kernel thread running now (task flags with PF_KTHREAD). A kworker's name in
    /proc carries its current work queue after the name the kernel records ("kworker/u8:6-events_unbound"):
    kept as /proc shows it."""
    out: dict[int, str] = {}
    for d in os.listdir(proc):
        if not d.isdigit():
            continue
        try:
            with open(f"{proc}/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        lp, rp = stat.find("("), stat.rfind(")")
        fields = stat[rp + 2:].split()
        # after "pid (comm)": state ppid pgrp session tty_nr tpgid flags
        if 0 <= lp < rp and len(fields) >= 7 and int(fields[6]) & PF_KTHREAD:
            out[int(d)] = stat[lp + 1:rp]
    return out


def kernel_threads(comms: dict[int, str], *tables: dict[int, str]) -> set[str]:
    """The names in a capture's {pid: name} that are kernel threads' (jbd2/..., kworker/..., kswapd0): the
    pid was a kernel thread of that name in one of the tables (kernel_thread_table() at the start and
    at the end of the recording). A kernel thread born and gone during the recording is in neither: its
    name is hidden."""
    out: set[str] = set()
    for pid, name in comms.items():
        for t in tables:
            now = t.get(pid)
            if now is not None and (now == name or (now.startswith(name) and now[len(name):len(name) + 1] in "+-")):
                out.add(name)
    return out
