"""What every live tool's collector is (docs/hacking.md): the one interface between the kernel (or /proc,
netlink) and a tool's pure model.

A collector owns what it reads (a BPF object, maps, files, sockets), hands out one typed sample per call of
sample(tick), one consistent moment, and decides nothing about what is shown; close() releases everything
(detaches every program) and is called on every path. The tick says what the call is:

- started: the wall time the interval began (the sample's "since");
- reset:   the next interval starts from zero (the maps are emptied as they are read);
- final:   the last sample of the run (Ctrl-C, the count reached): settle what is still open.

tools/common.run_intervals calls emit(tick) once per interval; emit does collector -> model -> view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar


@dataclass(frozen=True)
class Tick:
    started: float
    reset: bool = False
    final: bool = False


S_co = TypeVar("S_co", covariant=True)


class Collector(Protocol[S_co]):
    @property
    def unavailable(self) -> list[str]:
        """Hooks this kernel lacks, one line each (tools/common prints them once, as one banner)."""

    def sample(self, tick: Tick) -> S_co:
        """One consistent moment since tick.started."""

    def close(self) -> None:
        """Release everything: programs detached, maps and files closed. Idempotent."""
