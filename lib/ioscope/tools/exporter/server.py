"""The exporter's HTTP side: the --listen address as Prometheus exporters take it, and a server that
answers /metrics (prometheus_client's WSGI app: content negotiation, gzip, name[] filters), a small
landing page at / that links to it, and 404 everywhere else, as node_exporter does."""

from __future__ import annotations

import html
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from ioscope.base.errors import IoscopeError, UsageError

DEFAULT_LISTEN = "127.0.0.1:9863"
ANY = ""  # ":PORT": every address of the host, IPv6 and IPv4

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def parse_listen(text: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' (every address), '[V6]:PORT' or 'PORT' (the default address) -> (host, port);
    host is ANY for every address. A host name is resolved when the server binds."""
    t = text.strip()
    host, port = DEFAULT_LISTEN.rpartition(":")[0], t
    if t.startswith("["):
        inside, sep, rest = t[1:].partition("]")
        if not sep or not rest.startswith(":") or not inside:
            raise _bad(text)
        host, port = inside, rest[1:]
    elif ":" in t:
        host, _, port = t.rpartition(":")
        if ":" in host:
            raise UsageError(f"--listen {text!r}: an IPv6 address takes brackets", "for example --listen [::1]:9863")
        host = host or ANY
    if not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() or c in "/[]" for c in host):
        raise _bad(text)
    return host, int(port)


def _bad(text: str) -> UsageError:
    return UsageError(f"--listen {text!r} is not HOST:PORT, :PORT, [IPV6]:PORT or PORT",
                      "for example --listen 127.0.0.1:9863, --listen :9863 (every address) or --listen [::1]:9863")


def url(host: str, port: int) -> str:
    shown = "[::]" if host == ANY else f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/metrics"


def landing_page(version: str) -> bytes:
    return (
        "<!DOCTYPE html>\n<html>\n<head><title>ioscope exporter</title></head>\n<body>\n"
        "<h1>ioscope exporter</h1>\n"
        "<p>Block I/O latency histograms, disk counters and losses for Prometheus.</p>\n"
        "<ul><li><a href=\"metrics\">Metrics</a></li></ul>\n"
        f"<p>ioscope {html.escape(version)}</p>\n</body>\n</html>\n").encode()


def app(metrics: WSGIApp, version: str) -> WSGIApp:
    """/metrics: the metrics; /: the landing page; anything else: 404; a method but GET or HEAD: 405."""
    page = landing_page(version)

    def serve(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain; charset=utf-8"),
                                                      ("Allow", "GET, HEAD")])
            return [b"405 method not allowed\n"]
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [page] if method == "GET" else []
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"404 page not found\n"]

    return serve


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per request on stderr."""


def _server_class(family: int) -> type:
    from prometheus_client.exposition import ThreadingWSGIServer

    class Server(ThreadingWSGIServer):
        address_family = family

        def server_bind(self) -> None:
            if family == socket.AF_INET6:  # '::' takes IPv4 too (as Go's ':PORT' does)
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            super().server_bind()

    return Server


def serve(host: str, port: int, wsgi: WSGIApp) -> tuple[Any, threading.Thread]:
    """Bind and serve in a daemon thread; the server's shutdown() and server_close() stop it. ANY binds
    '::' (IPv6 and IPv4), or '0.0.0.0' where the host has no IPv6."""
    candidates = ["::", "0.0.0.0"] if host == ANY else [host]
    err: OSError | None = None
    for h in candidates:
        try:
            family, _, _, _, addr = socket.getaddrinfo(h, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
            server: Any = make_server(str(addr[0]), port, wsgi, _server_class(family), handler_class=_QuietHandler)
        except OSError as e:
            err = e
            continue
        t = threading.Thread(target=server.serve_forever, name="ioscope-exporter-http", daemon=True)
        t.start()
        return server, t
    why = getattr(err, "strerror", None) or str(err)
    raise IoscopeError(f"cannot listen on {url(host, port).removesuffix('/metrics')}: {why}",
                       "pick another address or port with --listen")


__all__ = ["ANY", "DEFAULT_LISTEN", "app", "landing_page", "parse_listen", "serve", "url"]
