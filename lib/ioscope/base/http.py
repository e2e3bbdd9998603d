"""A local HTTP server for a tool's page: the --listen address as Prometheus exporters take it (HOST:PORT,
:PORT for every address, [IPV6]:PORT, or PORT on the default host), bound and served from a thread of its
own, with no line per request. (tools/exporter/server.py has the same parse_listen and serve for /metrics;
they can be one.)"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

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
            raise UsageError(f"--listen {text!r}: an IPv6 address takes brackets", "for example --listen [::1]:8079")
        host = host or ANY
    if not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() or c in "/[]" for c in host):
        raise _bad(text, default)
    return host, int(port)


def _bad(text: str, default: str) -> UsageError:
    return UsageError(f"--listen {text!r} is not HOST:PORT, :PORT, [IPV6]:PORT or PORT",
                      f"for example --listen {default} or --listen :{default.rpartition(':')[2]} (every address)")


def root_url(host: str, port: int) -> str:
    shown = "[::]" if host == ANY else f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per request on stderr."""


def _server_class(family: int) -> type:
    class Server(ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = True

        def server_bind(self) -> None:
            if family == socket.AF_INET6:  # '::' takes IPv4 too
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            super().server_bind()

    return Server


def serve(host: str, port: int, wsgi: WSGIApp, name: str) -> tuple[Any, threading.Thread]:
    """Bind and serve in a daemon thread; the server's shutdown() and server_close() stop it."""
    candidates = ["::", "0.0.0.0"] if host == ANY else [host]
    err: OSError | None = None
    for h in candidates:
        try:
            family, _, _, _, addr = socket.getaddrinfo(h, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
            server: Any = make_server(str(addr[0]), port, wsgi, _server_class(family), handler_class=_QuietHandler)
        except OSError as e:
            err = e
            continue
        t = threading.Thread(target=server.serve_forever, name=f"ioscope-{name}-http", daemon=True)
        t.start()
        return server, t
    why = getattr(err, "strerror", None) or str(err)
    raise IoscopeError(f"cannot listen on {root_url(host, port)}: {why}", "pick another address or port with --listen")


__all__ = ["ANY", "StartResponse", "WSGIApp", "parse_listen", "root_url", "serve"]
