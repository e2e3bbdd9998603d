"""A veth pair between the root network namespace and one made for the test, and UDP traffic across it.

Everything is made with pyroute2 (netlink) and removed on every path. IPv6 is off on both ends and the
neighbours are permanent entries, so the only packets on the pair are the ones a test sends: the kernel's
counters then move by exactly the workload.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import IPRoute, NetNS, netns  # type: ignore[import-untyped]

NUD_PERMANENT = 0x80
SO_RCVBUFFORCE = 33
HEADERS = 14 + 20 + 8     # Ethernet + IPv4 + UDP: what a veth counts beyond a datagram's payload
PORT = 9771


def _disable_ipv6(ifname: str) -> None:
    Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1\n")


def sysfs_counters(ifname: str) -> dict[str, int]:
    """The kernel's counters of an interface of the root namespace, as sysfs shows them."""
    base = Path("/sys/class/net", ifname, "statistics")
    return {p.name: int(p.read_text()) for p in base.iterdir()}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


@dataclass
class VethPair:
    ns: str
    outer: str            # in the root namespace: the one ioscope nic watches
    inner: str            # in the test's namespace
    outer_ip: str
    inner_ip: str

    @contextlib.contextmanager
    def in_ns(self) -> Iterator[None]:
        """This thread in the test's namespace (sockets made here stay there)."""
        netns.pushns(self.ns)
        try:
            yield
        finally:
            netns.popns()

    def udp(self, inner: bool) -> socket.socket:
        """A UDP socket bound to PORT at one end, with a receive buffer big enough for a whole test."""
        if inner:
            with self.in_ns():
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
        s.bind((self.inner_ip if inner else self.outer_ip, PORT))
        return s

    def set_up(self, inner: bool, up: bool) -> None:
        if inner:
            with NetNS(self.ns) as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname=self.inner)[0], state="up" if up else "down")
        else:
            with IPRoute() as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname=self.outer)[0], state="up" if up else "down")

    def set_mtu(self, inner: bool, mtu: int) -> None:
        if inner:
            with NetNS(self.ns) as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname=self.inner)[0], mtu=mtu)
        else:
            with IPRoute() as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname=self.outer)[0], mtu=mtu)


def send(sock: socket.socket, to: str, sizes: list[int]) -> int:
    """Send one datagram per size; returns the bytes the veth counts for them (payload + headers)."""
    for n in sizes:
        sock.sendto(b"\x5a" * n, (to, PORT))
    return sum(n + HEADERS for n in sizes)


def drain(sock: socket.socket, expect: int, timeout: float = 5.0) -> list[int]:
    """The sizes of the datagrams received, until `expect` of them or timeout."""
    sock.settimeout(timeout)
    got: list[int] = []
    with contextlib.suppress(TimeoutError):
        while len(got) < expect:
            got.append(len(sock.recv(65536)))
    return got


@contextlib.contextmanager
def veth_pair() -> Iterator[VethPair]:
    tag = f"{os.getpid() % 100000}"
    net = 10 + os.getpid() % 200
    pair = VethPair(ns=f"iosnic{tag}", outer=f"iosna{tag}", inner=f"iosnb{tag}",
                    outer_ip=f"10.213.{net}.1", inner_ip=f"10.213.{net}.2")
    netns.create(pair.ns)
    try:
        with IPRoute() as ipr:
            ipr.link("add", ifname=pair.outer, kind="veth", peer={"ifname": pair.inner, "net_ns_fd": pair.ns})
            try:
                oidx = ipr.link_lookup(ifname=pair.outer)[0]
                _disable_ipv6(pair.outer)
                ipr.addr("add", index=oidx, address=pair.outer_ip, prefixlen=24)
                with NetNS(pair.ns) as nsr:
                    iidx = nsr.link_lookup(ifname=pair.inner)[0]
                    with pair.in_ns():
                        _disable_ipv6(pair.inner)
                    nsr.addr("add", index=iidx, address=pair.inner_ip, prefixlen=24)
                    inner_mac = nsr.get_links(iidx)[0].get_attr("IFLA_ADDRESS")
                    outer_mac = ipr.get_links(oidx)[0].get_attr("IFLA_ADDRESS")
                    nsr.neigh("add", dst=pair.outer_ip, lladdr=outer_mac, ifindex=iidx, state=NUD_PERMANENT)
                    ipr.neigh("add", dst=pair.inner_ip, lladdr=inner_mac, ifindex=oidx, state=NUD_PERMANENT)
                    nsr.link("set", index=iidx, state="up")
                ipr.link("set", index=oidx, state="up")
                yield pair
            finally:
                with contextlib.suppress(Exception):
                    ipr.link("del", index=ipr.link_lookup(ifname=pair.outer)[0])
    finally:
        netns.remove(pair.ns)
