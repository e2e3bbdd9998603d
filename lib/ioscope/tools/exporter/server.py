"""The exporter's HTTP side: a server that a fleet can expose (docs/exporter.md, 'Serving'); the --listen
address is parsed and bound by base/http.py, as for every tool that listens.

One thread runs an asyncio event loop that owns every connection (h11 parses and writes HTTP/1.1); a
connection costs a descriptor and a few KiB, never a thread, whatever the client does. The limits:

- `max_connections` connections at once; one more closes a connection without a request in
  progress: first those that have not sent a byte since they connected, then idle keep-alive ones,
  then those part-way through a request's head, each time the one waiting longest (a scrape being
  answered is never closed). A flood of idle sockets cannot keep a scraper out, nor close the
  keep-alive connection of a scraper that has already been answered between two of its scrapes;
- a request's head must arrive within `read_timeout` of the connection (or of its first byte after
  an idle keep-alive), an idle keep-alive connection is closed after `idle_timeout`, a response must
  be taken within `write_timeout`; TLS handshakes get `read_timeout` too;
- `max_requests` requests of the telemetry path at once (node_exporter's --web.max-requests): one
  more is answered 503 at once;
- scrapes never collect in parallel: one collection runs at a time, in a worker thread. A scrape
  answered alone gets a collection made after it arrived; scrapes that come while others are being
  answered get the latest collection at once if it is less than FRESH_S (1 s) old, or STALE_S (5 s) while
  the next one is being made (Collections).

Paths: the telemetry path (GET: the metrics, prometheus_client's text or OpenMetrics encoders by
Accept, gzip by Accept-Encoding, name[] filters; HEAD: the same headers, no body), `/` a
landing page that links to it, 404 for every other path, 405 for a method but GET or HEAD; 414 for a
request line over 8 KiB, 431 for a head over 16 KiB, 400 for what HTTP/1.1 does not allow. No
`Server` header. With a web configuration file (webconfig.py): TLS, basic authentication (401), its
headers and rate limit (429); a file that became invalid answers 500."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import html
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

import h11

from ioscope.base import live
from ioscope.base.http import bind
from ioscope.tools.exporter.webconfig import (
    BasicAuth,
    RateLimit,
    WebConfig,
    WebConfigError,
    WebConfigFile,
    sans_allowed,
)

MAX_TARGET = 8192      # request line: 414 beyond
MAX_HEAD = 16384       # request head: 431 beyond (h11's incomplete-event bound)
MAX_BODY = 65536       # a GET or HEAD with a body beyond this: 413
SWEEP_S = 0.25         # how often deadlines are looked at
FRESH_S = 1.0          # while several scrapes are answered at once, each gets a collection at most this old
STALE_S = 5.0          # ... or, while the next one is being made (a busy host), at most this old


def landing_page(version: str, telemetry_path: str = "/metrics") -> bytes:
    return (
        "<!DOCTYPE html>\n<html>\n<head><title>ioscope exporter</title></head>\n<body>\n"
        "<h1>ioscope exporter</h1>\n"
        "<p>Block I/O latency histograms, disk counters and losses for Prometheus.</p>\n"
        f"<ul><li><a href=\"{html.escape(telemetry_path.lstrip('/') or '.')}\">Metrics</a></li></ul>\n"
        f"<p>ioscope {html.escape(version)}</p>\n</body>\n</html>\n").encode()


@dataclass(frozen=True)
class Limits:
    max_requests: int = 40          # telemetry requests at once; 0: no limit
    max_connections: int = 512
    read_timeout_s: float = 10.0
    idle_timeout_s: float = 90.0
    write_timeout_s: float = 30.0


@dataclass
class Stats:
    """What the server counts about itself (the promhttp_* and ioscope_http_* metrics)."""

    by_code: dict[int, int] = field(default_factory=dict)   # telemetry requests answered, by status
    in_flight: int = 0                                       # telemetry requests being answered
    connections: int = 0
    closed: dict[str, int] = field(default_factory=dict)    # connections the server closed, by why
    errors: int = 0                                          # collections that failed

    def close(self, why: str) -> None:
        self.closed[why] = self.closed.get(why, 0) + 1


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""


# What a scrape's Accept header may choose, as prometheus_client's choose_encoder reads it: the
# exposition formats' versions it writes, and openmetrics' name escapings.
_OPENMETRICS_VERSIONS = ("1.0.0", "2.0.0")
_ESCAPINGS = ("allow-utf-8", "underscores", "dots", "values")


def negotiate(accept: str) -> str:
    """The Accept header's first format this server writes, rewritten from known words only ("" for the
    text format 0.0.4). prometheus_client's choose_encoder raised on a version that is no number and echoed
    any version and escaping into the answer's Content-Type (control bytes included, which h11 refuses to
    send; found by tests/fuzz/fuzz_http.py), and each distinct echo was an encoding cached apart: a client
    sending new versions grew the caches without bound. Here an unknown version or escaping is left out."""
    for entry in accept.split(",")[:32]:
        toks = [t.strip() for t in entry.split(";")]
        media = toks[0].lower()
        if media not in ("application/openmetrics-text", "text/plain"):
            continue
        params = dict(t.split("=", 1) for t in toks[1:] if "=" in t)
        version, escaping = params.get("version", ""), params.get("escaping", "")
        esc = f"; escaping={escaping}" if escaping in _ESCAPINGS else ""
        if media == "text/plain":
            if version == "1.0.0":
                return f"text/plain; version=1.0.0{esc}"
            continue  # 0.0.4, or a version no encoder writes: the default below is 0.0.4 too
        if version in _OPENMETRICS_VERSIONS:
            return f"application/openmetrics-text; version={version}{esc}"
        return f"application/openmetrics-text{esc}"
    return ""


def _text(status: int, body: str, headers: Iterable[tuple[str, str]] = ()) -> Response:
    return Response(status, [("Content-Type", "text/plain; charset=utf-8"), *headers], body.encode())


class Exposition:
    """The metrics of one collection, encoded on demand (once per encoding when unfiltered)."""

    def __init__(self, families: list[Any]) -> None:
        self.families = families
        self._encoded: dict[tuple[str, bool], tuple[bytes, str]] = {}
        self._pending: dict[tuple[str, bool], asyncio.Future[tuple[bytes, str]]] = {}

    async def encoded(self, loop: asyncio.AbstractEventLoop, pool: ThreadPoolExecutor, accept: str, gzipped: bool,
                      names: set[str] | None) -> tuple[bytes, str]:
        """The body for these headers: encoded once per encoding (in pool, never on the event loop; the
        encodings scrapers asked for lately are made with the collection, before it is published) and
        shared by every request that wants it; a name[] filter is encoded for its request alone."""
        from prometheus_client.exposition import choose_encoder

        if names is not None:
            return await loop.run_in_executor(pool, self.encode, accept, gzipped, names)
        key = (choose_encoder(accept)[1], gzipped)
        done = self._encoded.get(key)
        if done is not None:
            return done
        fut = self._pending.get(key)
        if fut is None:
            fut = self._pending[key] = loop.run_in_executor(pool, self.encode, accept, gzipped, None)
        return await asyncio.shield(fut)

    def encode(self, accept: str, gzipped: bool, names: set[str] | None) -> tuple[bytes, str]:
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept)
        key = (content_type, gzipped)
        if names is None and key in self._encoded:
            return self._encoded[key]
        fams = self.families
        if names is not None:  # name[]=...: the samples of those names, as prometheus_client's filter keeps
            from prometheus_client.metrics_core import Metric

            fams = []
            for f in self.families:
                kept = [s for s in f.samples if s.name in names]
                if kept:
                    g = Metric(f.name, f.documentation, f.type, f.unit)
                    g.samples = kept
                    fams.append(g)
        body = encoder(_Families(fams))
        if gzipped:
            body = gzip.compress(body, compresslevel=6)
        if names is None:
            self._encoded[key] = (body, content_type)
        return body, content_type


class _Families:
    def __init__(self, fams: list[Any]) -> None:
        self.fams = fams

    def collect(self) -> list[Any]:
        return self.fams


class Collections:
    """One collection at a time, in its own thread.

    A request answered alone (no other telemetry request in flight) gets a collection that starts
    after it arrived (several that arrive together share one). Requests that come while others are
    being answered (several scrapers, a storm of them) are answered at once from the latest
    collection when it is less than FRESH_S old (STALE_S while the next one is being made), and a new
    one is started in the background when it is older than half that; so a storm costs a collection or
    two a second, not one a request, and no request waits behind the others."""

    def __init__(self, collect: Callable[[], list[Any]], loop: asyncio.AbstractEventLoop) -> None:
        self.collect = collect
        self.loop = loop
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ioscope-exporter-collect")
        # encodings apart: an answer from the latest collection never waits behind the next one
        self.encoders = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ioscope-exporter-encode")
        self.running: asyncio.Future[Exposition] | None = None
        self.next: asyncio.Future[Exposition] | None = None
        self.latest: Exposition | None = None
        self.latest_at = 0.0  # when the latest collection ended (monotonic)
        self.formats: dict[tuple[str, bool], tuple[str, float]] = {}  # encodings asked for: (accept, when)
        self.count = 0        # collections made

    def get(self, alone: bool) -> Awaitable[Exposition]:
        age = time.monotonic() - self.latest_at
        if not alone:  # in a crowd: any collection that is (or will be, when it ends) less than FRESH_S old,
            # or up to STALE_S old while the next one is being made: on a host short of CPU a collection can
            # take longer than FRESH_S / 2, and a crowd waiting for it filled --web.max-requests (503s)
            if self.latest is not None and (age < FRESH_S or (self.running is not None and age < STALE_S)):
                if self.running is None and age >= FRESH_S / 2:
                    self.running = self._start()  # ahead of need: nobody waits for it
                done: asyncio.Future[Exposition] = self.loop.create_future()
                done.set_result(self.latest)
                return done
            if self.running is None:
                self.running = self._start()
            return asyncio.shield(self.running)
        if self.running is None:
            self.running = self._start()
            return asyncio.shield(self.running)
        if self.next is None:  # one runs, started before this request: wait for the one after it
            self.next = self.loop.create_future()
        return asyncio.shield(self.next)

    def asked(self, accept: str, gzipped: bool) -> None:
        """A scraper asked for this encoding: made with every collection for the next minute."""
        from prometheus_client.exposition import choose_encoder

        self.formats[(choose_encoder(accept)[1], gzipped)] = (accept, time.monotonic())

    def _collect(self) -> Exposition:
        x = Exposition(self.collect())
        now = time.monotonic()
        for key, (accept, at) in list(self.formats.items()):
            if now - at > 60:
                self.formats.pop(key, None)
            else:
                x.encode(accept, key[1], None)
        self.count += 1
        return x

    def _start(self) -> asyncio.Future[Exposition]:
        fut: asyncio.Future[Exposition] = self.loop.run_in_executor(self.pool, self._collect)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, fut: asyncio.Future[Exposition]) -> None:
        self.running = None
        if not fut.cancelled() and fut.exception() is None:
            self.latest, self.latest_at = fut.result(), time.monotonic()
        waiting, self.next = self.next, None
        if waiting is None:
            return
        self.running = self._start()

        def chain(done: asyncio.Future[Exposition]) -> None:
            if waiting.done():
                return
            if done.cancelled():
                waiting.cancel()
            elif done.exception() is not None:
                waiting.set_exception(done.exception())  # type: ignore[arg-type]
            else:
                waiting.set_result(done.result())

        self.running.add_done_callback(chain)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.encoders.shutdown(wait=False, cancel_futures=True)


@dataclass
class App:
    """What the server answers: the telemetry path's metrics, the landing page, and the rest."""

    collect: Callable[[], list[Any]]
    version: str
    telemetry_path: str = "/metrics"
    limits: Limits = field(default_factory=Limits)
    web: WebConfigFile | None = None


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self.transport: asyncio.Transport | None = None
        self.data = asyncio.Event()
        self.writable = asyncio.Event()
        self.writable.set()
        self.closed = False
        self.busy = False           # a request is being answered: never evicted
        self.deadline = 0.0         # closed by the sweep past it (0: none)
        self.deadline_why = "read_timeout"
        self.waiting_since = 0.0    # since when it waits without a request in progress
        self.spoken = False         # it has sent a byte (a client, not one of a flood of idle sockets)
        self.task: asyncio.Task[None] | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        now = time.monotonic()
        self.waiting_since = now
        self.deadline = now + self.server.app.limits.read_timeout_s
        if self.server.tls:
            transport.pause_reading()  # the ClientHello is the TLS layer's, read once start_tls is in place
        if not self.server.admit(self):
            return
        self.task = self.server.loop.create_task(self.run())

    def data_received(self, data: bytes) -> None:
        if data and not self.spoken:
            self.spoken = True
            self.server.silent.pop(self, None)
        if data:
            self.server.idle.pop(self, None)  # a request on its way: no longer idle
        if not self.busy and self.h11.their_state is h11.IDLE and not self.h11.trailing_data[0] and data:
            # the first byte of a request after an idle keep-alive: its head has read_timeout from now
            self.deadline = min(self.deadline, time.monotonic() + self.server.app.limits.read_timeout_s)
            self.deadline_why = "read_timeout"
        try:
            self.h11.receive_data(data)
        except h11.RemoteProtocolError:
            pass  # next_event() raises it again, in run()
        self.data.set()

    def eof_received(self) -> bool | None:
        with contextlib.suppress(h11.RemoteProtocolError):
            self.h11.receive_data(b"")
        self.data.set()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.data.set()
        self.writable.set()
        self.server.forget(self)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    @property
    def evict_rank(self) -> int:
        """Which connections a new one closes first (lowest): 0 silent since it connected, 1 idle after
        a request answered, 2 a request's head on its way."""
        if not self.spoken:
            return 0
        return 1 if self.h11.their_state is h11.IDLE and not self.h11.trailing_data[0] else 2

    # the connection's life
    def close(self, why: str) -> None:
        """Close now: counted once, out of the server's table at once (the transport tells later)."""
        if not self.closed and self.transport is not None:
            self.closed = True
            self.data.set()
            self.writable.set()
            self.server.stats.close(why)
            self.server.forget(self)
            self.transport.abort()

    async def _tls(self) -> bool:
        assert self.transport is not None
        try:
            web = self.server.web_config()
            ctx = web.tls if web is not None else None
            if ctx is None:
                raise WebConfigError(self.server.app.web.path if self.server.app.web else "", "TLS is off")
            self.transport = await self.server.loop.start_tls(
                self.transport, self, ctx, server_side=True,
                ssl_handshake_timeout=self.server.app.limits.read_timeout_s)
        except (OSError, ssl.SSLError, ConnectionError, asyncio.TimeoutError, WebConfigError):
            self.close("tls_handshake")
            return False
        if web is not None and web.allowed_sans is not None:
            assert self.transport is not None
            obj = self.transport.get_extra_info("ssl_object")
            if obj is None or not sans_allowed(obj.getpeercert(), web.allowed_sans):
                self.close("tls_client_san")
                return False
        return True

    async def _event(self) -> Any:
        while True:
            ev = self.h11.next_event()
            if ev is not h11.NEED_DATA:
                return ev
            if self.closed:
                return h11.ConnectionClosed()
            self.data.clear()
            await self.data.wait()

    async def _send(self, r: Response, head: bool = False) -> None:
        assert self.transport is not None
        headers = [*r.headers, *self.server.extra_headers(), ("Content-Length", str(len(r.body)))]
        try:
            reason = HTTPStatus(r.status).phrase.encode()
        except ValueError:
            reason = b""
        out = self.h11.send(h11.Response(status_code=r.status, headers=headers, reason=reason)) or b""
        if not head:
            out += self.h11.send(h11.Data(data=r.body)) or b""
        out += self.h11.send(h11.EndOfMessage()) or b""
        self.transport.write(out)
        if not self.writable.is_set():
            try:
                await asyncio.wait_for(self.writable.wait(), self.server.app.limits.write_timeout_s)
            except asyncio.TimeoutError:
                self.close("write_timeout")

    async def run(self) -> None:
        try:
            if self.server.tls and not await self._tls():
                return
            while not self.closed:
                try:
                    ev = await self._event()
                except h11.RemoteProtocolError as e:
                    if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                        self.busy = True
                        status = e.error_status_hint if e.error_status_hint >= 400 else 400
                        await self._send(_text(status, f"{status} {_REASONS.get(status, 'bad request')}\n",
                                               [("Connection", "close")]))
                    self.close("bad_request")
                    return
                if isinstance(ev, h11.ConnectionClosed):
                    self.close("client_closed")
                    return
                if not isinstance(ev, h11.Request):
                    continue
                self.busy = True
                self.deadline = 0.0
                body = 0
                while True:  # a GET or HEAD has no body to speak of: read and drop it
                    more = await self._event()
                    if isinstance(more, h11.Data):
                        body += len(more.data)
                    elif isinstance(more, (h11.EndOfMessage, h11.ConnectionClosed)):
                        break
                    if body > MAX_BODY:
                        break
                if self.closed:
                    return
                if body > MAX_BODY:
                    await self._send(_text(413, "413 request entity too large\n", [("Connection", "close")]))
                    self.close("bad_request")
                    return
                r, head = await self.server.answer(ev, self)
                await self._send(r, head)
                if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is h11.MUST_CLOSE:
                    self.close("done")
                    return
                try:
                    self.h11.start_next_cycle()
                except h11.LocalProtocolError:
                    self.close("done")
                    return
                self.busy = False
                now = time.monotonic()
                self.waiting_since = now
                self.deadline, self.deadline_why = now + self.server.app.limits.idle_timeout_s, "idle_timeout"
                if self.h11.trailing_data[0]:  # a pipelined request is already here: read_timeout for it
                    self.deadline, self.deadline_why = now + self.server.app.limits.read_timeout_s, "read_timeout"
                elif not self.closed:
                    self.server.idle[self] = None  # the newest idle keep-alive (evict_rank 1)
        except Exception:
            self.close("error")
            raise


_REASONS = {400: "bad request", 413: "request entity too large", 414: "uri too long",
            431: "request header fields too large"}


class Server:
    """The listening sockets, their connections and the event loop's thread."""

    def __init__(self, sockets: list[socket.socket], app: App, version: str) -> None:
        self.sockets = sockets
        self.app = app
        self.version = version
        self.stats = Stats()
        self.tls = app.web is not None and app.web.config.tls is not None
        self.conns: dict[Connection, None] = {}
        # the connections a new one may close first, each in the order it began to wait (oldest first), so
        # that a flood of connects costs O(1) each (a scan of 512 was most of a connect's cost in the
        # exporter): silent since they connected (evict_rank 0), idle after an answer (1)
        self.silent: dict[Connection, None] = {}
        self.idle: dict[Connection, None] = {}
        self.loop = asyncio.new_event_loop()
        self.collections = Collections(app.collect, self.loop)
        self.auth = BasicAuth() if app.web is not None else None
        self.auth_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ioscope-exporter-auth")
        self.rate = RateLimit()
        self.page = landing_page(version, app.telemetry_path)
        self._servers: list[asyncio.AbstractServer] = []
        self._thread = threading.Thread(target=self._run, name="ioscope-exporter-http", daemon=True)
        self._started = live.Flag()
        self._error: BaseException | None = None
        self._web: WebConfig | None = app.web.config if app.web is not None else None

    # lifecycle
    def start(self) -> None:
        live.start_thread(self._thread)
        self._started.wait()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            for s in self.sockets:
                self._servers.append(self.loop.run_until_complete(
                    self.loop.create_server(lambda: Connection(self), sock=s, backlog=socket.SOMAXCONN)))
            sweeper = self.loop.create_task(self._sweep())
        except BaseException as e:  # handed to start()
            self._error = e
            self._started.set()
            return
        self._started.set()
        try:
            self.loop.run_forever()
        finally:
            sweeper.cancel()
            for c in list(self.conns):
                if c.transport is not None:
                    c.transport.abort()
            for srv in self._servers:
                srv.close()
            with contextlib.suppress(Exception):
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for t in pending:
                    t.cancel()
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def shutdown(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        self.collections.close()
        self.auth_pool.shutdown(wait=False, cancel_futures=True)
        for s in self.sockets:
            s.close()

    # connections
    def admit(self, c: Connection) -> bool:
        """Room for one more connection: one without a request in progress goes, the silent before the
        idle keep-alive before the half-sent, each the one waiting longest (Connection.evict_rank)."""
        if len(self.conns) >= self.app.limits.max_connections:
            victim = next(iter(self.silent), None) or next(iter(self.idle), None) or min(
                (x for x in self.conns if not x.busy), key=lambda x: (x.evict_rank, x.waiting_since), default=None)
            if victim is None:
                c.close("limit")
                return False
            victim.close("evicted")
        self.conns[c] = None
        self.silent[c] = None
        self.stats.connections = len(self.conns)
        return True

    def forget(self, c: Connection) -> None:
        self.conns.pop(c, None)
        self.silent.pop(c, None)
        self.idle.pop(c, None)
        self.stats.connections = len(self.conns)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            now = time.monotonic()
            for c in list(self.conns):
                if c.deadline and now >= c.deadline and not c.busy:
                    c.close(c.deadline_why)

    # the web configuration file
    def web_config(self) -> WebConfig | None:
        if self.app.web is None:
            return None
        self._web = self.app.web.current()
        return self._web

    def extra_headers(self) -> list[tuple[str, str]]:
        return list(self._web.headers.items()) if self._web is not None else []

    # answers
    async def answer(self, req: h11.Request, conn: Connection) -> tuple[Response, bool]:
        method = req.method.decode("ascii", "replace")
        target = req.target.decode("latin-1")
        head = method == "HEAD"
        if len(req.target) > MAX_TARGET:
            return _text(414, "414 uri too long\n"), head
        if sum(len(k) + len(v) + 4 for k, v in req.headers) > MAX_HEAD:  # h11 bounds only a head still arriving
            return _text(431, "431 request header fields too large\n"), head
        try:
            web = self.web_config()
        except WebConfigError:
            return _text(500, "500 internal server error: the web configuration file is invalid\n"), head
        if web is not None:
            if not self.rate.allow(web.rate):
                return _text(429, "429 too many requests\n"), head
            hdrs = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in req.headers}
            if self.auth is not None and web.users:
                creds = self.auth.credentials(hdrs.get("authorization"))
                ok = self.auth.cached(web.users, creds)
                if ok is None:
                    ok = await self.loop.run_in_executor(self.auth_pool, self.auth.check, web.users, creds)
                if not ok:
                    return _text(401, "401 unauthorized\n", [("WWW-Authenticate", "Basic")]), head
        path, _, query = target.partition("?")
        if method not in ("GET", "HEAD"):
            return _text(405, "405 method not allowed\n", [("Allow", "GET, HEAD")]), head
        if path == self.app.telemetry_path:
            return await self._metrics(req, query), head
        if path == "/":
            return Response(200, [("Content-Type", "text/html; charset=utf-8")], self.page), head
        return _text(404, "404 page not found\n"), head

    async def _metrics(self, req: h11.Request, query: str) -> Response:
        lim = self.app.limits.max_requests
        if lim and self.stats.in_flight >= lim:
            return self._count(_text(503, f"Limit of concurrent requests reached ({lim}), try again later.\n"))
        self.stats.in_flight += 1
        try:
            hdrs = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in req.headers}
            accept, enc = negotiate(hdrs.get("accept", "")), hdrs.get("accept-encoding", "")
            gz = "gzip" in enc
            names = parse_qs(query).get("name[]")
            if not names:
                self.collections.asked(accept, gz)
            try:
                x = await self.collections.get(alone=self.stats.in_flight == 1)
                body, ctype = await x.encoded(self.loop, self.collections.encoders, accept, gz,
                                              set(names) if names else None)
            except Exception as e:  # a failed collection is a 500 and a count, not a dead server
                self.stats.errors += 1
                return self._count(_text(500, f"500 internal server error: {type(e).__name__}: {e}\n"))
            headers = [("Content-Type", ctype)]
            if gz:
                headers.append(("Content-Encoding", "gzip"))
            return self._count(Response(200, headers, body))
        finally:
            self.stats.in_flight -= 1

    def _count(self, r: Response) -> Response:
        self.stats.by_code[r.status] = self.stats.by_code.get(r.status, 0) + 1
        return r


def serve(host: str, port: int, app: App, version: str) -> Server:
    """Bind (a one-line error when it cannot) and serve from the event loop's thread; shutdown() stops it."""
    sock = bind(host, port)
    sock.setblocking(False)
    server = Server([sock], app, version)
    server.start()
    return server


__all__ = ["App", "Limits", "Server", "Stats", "landing_page", "serve"]
