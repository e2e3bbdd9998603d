"""HTTP listeners: the --listen address as Prometheus exporters take it (HOST:PORT, :PORT for every
address, [IPV6]:PORT, or PORT on the tool's default host), the listening socket bound for it (bind: '::'
takes IPv4 too), and a small WSGI server for a tool's page, served from a thread of its own with no line
per request (serve). The exporter parses and binds with these, and serves /metrics with its own hardened
server (tools/exporter/server.py: limits, timeouts, TLS)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ioscope.base import live
from ioscope.base.errors import IoscopeError, UsageError

ANY = ""  # ":PORT": every address of the host, IPv6 and IPv4
StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def parse_listen(text: str, default: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' (every address), '[V6]:PORT' or 'PORT' (default's host) -> (host, port)."""
    t = text.strip()
    host, port = default.rpartition(":")[0], t
    if t.startswith("["):
        inside, sep, rest = t[1:].partition("]")
        if not sep or not rest.startswith(":") or not inside:
            raise _bad(text, default)
        host, port = inside, rest[1:]
    elif ":" in t:
        host, _, port = t.rpartition(":")
        if ":" in host:
            raise UsageError(f"--listen {text!r}: an IPv6 address takes brackets",
                             f"for example --listen [::1]:{default.rpartition(':')[2]}")
        host = host or ANY
    if not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() or c in "/[]" for c in host):
        raise _bad(text, default)
    return host, int(port)


def _bad(text: str, default: str) -> UsageError:
    return UsageError(f"--listen {text!r} is not HOST:PORT, :PORT, [IPV6]:PORT or PORT",
                      f"for example --listen {default} or --listen :{default.rpartition(':')[2]} (every address)")


def url(host: str, port: int, path: str = "/", tls: bool = False) -> str:
    """What a user types to reach (host, port): ANY shows as [::], an IPv6 address in brackets."""
    shown = "[::]" if host == ANY else f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}{path}"


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (blocking): ANY binds '::' (IPv6 and IPv4, as Go's ':PORT'), or '0.0.0.0' where
    the host has no IPv6; a host name is resolved (its first address). A one-line error when it cannot."""
    candidates = ["::", "0.0.0.0"] if host == ANY else [host]
    err: OSError | None = None
    for h in candidates:
        s = None
        try:
            family, kind, proto, _, addr = socket.getaddrinfo(h, port, type=socket.SOCK_STREAM,
                                                              flags=socket.AI_PASSIVE)[0]
            s = socket.socket(family, kind, proto)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and h == "::":
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind(addr)
            s.listen(socket.SOMAXCONN)
            return s
        except OSError as e:
            err = e
            if s is not None:
                s.close()
    why = getattr(err, "strerror", None) or str(err)
    raise IoscopeError(f"cannot listen on {url(host, port, '')}: {why}", "pick another address or port with --listen")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per request on stderr."""


class _Server(ThreadingMixIn, WSGIServer):
    """wsgiref's server on a socket bind() made."""

    daemon_threads = True

    def __init__(self, sock: socket.socket, host: str, wsgi: WSGIApp) -> None:
        self.address_family = sock.family
        super().__init__(sock.getsockname()[:2], _QuietHandler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_name, self.server_port = host or "localhost", sock.getsockname()[1]
        self.setup_environ()
        self.set_app(wsgi)


def serve(host: str, port: int, wsgi: WSGIApp, name: str) -> tuple[Any, threading.Thread]:
    """Bind and serve in a daemon thread; the server's shutdown() and server_close() stop it."""
    server = _Server(bind(host, port), host, wsgi)
    t = threading.Thread(target=server.serve_forever, name=f"ioscope-{name}-http", daemon=True)
    live.start_thread(t)
    return server, t


__all__ = ["ANY", "StartResponse", "WSGIApp", "bind", "parse_listen", "serve", "url"]
