"""Redaction of a bundle: every hostname, address, process name, path or user name of the classes asked
for is replaced, in every file of the bundle (the capture included), by a stable pseudonym: the same
name gets the same token everywhere (`host-1`, `comm-3`, `path-2`, ...). The mapping is never written.

Pure: the names to hide are learned from the context and the capture's process names (learn_*), then
applied to JSON (redact_json) and to process-note names (comm)."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CLASSES = ("hostnames", "addresses", "comms", "paths", "users")
PREFIX = {"hostnames": "host", "addresses": "addr", "comms": "comm", "paths": "path", "users": "user"}
# paths every Linux host has: hiding them hides nothing and makes the context unreadable
COMMON_PATHS = frozenset({"/", "/proc", "/sys", "/dev", "/run", "/tmp", "/boot", "/home", "/var", "/usr", "/etc",
                          "/dev/shm", "/dev/pts", "/dev/mqueue", "/sys/fs/cgroup", "/sys/kernel/tracing",
                          "/sys/kernel/debug", "/sys/fs/bpf", "/proc/sys/fs/binfmt_misc", "/dev/hugepages"})
ADDR_RE = re.compile(r"^[0-9a-fA-F:.]+$")


def parse_classes(text: str) -> tuple[str, ...]:
    from ioscope.errors import UsageError

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
        try:
            import pwd
            for u in pwd.getpwall():
                if u.pw_uid >= 1000 and u.pw_name != "nobody":
                    self.add("users", u.pw_name)
                    if u.pw_dir not in COMMON_PATHS:
                        self.add("paths", u.pw_dir)
        except (ImportError, KeyError):
            pass

    def learn_paths(self, paths: Iterable[str]) -> None:
        for p in paths:
            self.add("paths", p)

    def learn_comms(self, comms: Iterable[str]) -> None:
        for c in comms:
            if c != "ioscope":   # the recorder itself (its own writes, when it records every disk)
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
