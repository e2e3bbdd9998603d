"""Fuzz target http: the exporter's HTTP request parsing, as a connection does it (lib/ioscope/tools/exporter/
server.py: h11 with the server's head bound, then Server.answer: the target, the query's name[], Accept,
Accept-Encoding, Authorization), over the bytes a client sends; the answers are written back through h11.
A request it cannot parse is a 400 from h11's RemoteProtocolError, as Connection.run answers it; anything
else raised is the finding."""

import asyncio
import os
import sys
import traceback

import atheris

with atheris.instrument_imports(include=["ioscope"]):
    import h11
    from prometheus_client.core import GaugeMetricFamily

    from ioscope.tools.exporter import server, webconfig


def _families() -> list[object]:
    g = GaugeMetricFamily("ioscope_fuzz_requests", "a fuzzed exporter's one metric", labels=["disk"])
    g.add_metric(["sda"], 1.0)
    return [g]


SERVER = server.Server([], server.App(_families, "fuzz"), "fuzz")
asyncio.set_event_loop(SERVER.loop)


def _known(exc: BaseException) -> bool:
    """The first finding of the campaigns, in code this change may not touch (reported; kept as an xfail
    test, tests/test_reader_regressions.py): an Accept header's openmetrics version that is not a number
    ("version=1x") makes prometheus_client's choose_encoder raise TypeError out of Server.answer. Skipped
    here so that the campaign goes on past it, and only it: its last frame must be choose_encoder's."""
    last = traceback.extract_tb(exc.__traceback__)[-1]
    return isinstance(exc, TypeError) and last.name == "choose_encoder" and \
        last.filename.endswith(os.path.join("prometheus_client", "exposition.py"))


def one(data: bytes) -> None:
    try:
        _one(data)
    except TypeError as exc:
        if not _known(exc):
            raise


def _one(data: bytes) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=server.MAX_HEAD)
    try:
        conn.receive_data(data)
        conn.receive_data(b"")
        for _ in range(8):   # pipelined requests: a few
            ev = conn.next_event()
            if ev is h11.NEED_DATA or isinstance(ev, h11.ConnectionClosed):
                return
            if not isinstance(ev, h11.Request):
                continue
            while not isinstance(conn.next_event(), (h11.EndOfMessage, h11.ConnectionClosed, type(h11.NEED_DATA))):
                pass
            r, head = SERVER.loop.run_until_complete(SERVER.answer(ev, None))  # type: ignore[arg-type]
            hdrs = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in ev.headers}
            webconfig.BasicAuth.credentials(hdrs.get("authorization"))
            try:
                conn.send(h11.Response(status_code=r.status, headers=[*r.headers,
                                                                      ("Content-Length", str(len(r.body)))]))
            except (UnicodeEncodeError, h11.LocalProtocolError):
                ctype = dict(r.headers).get("Content-Type", "")
                if r.status == 200 and not (ctype.isascii() and ctype.isprintable()):
                    return   # the second finding (reported, an xfail test): the Accept header's version echoed
                raise

            if not head:
                conn.send(h11.Data(data=r.body))
            conn.send(h11.EndOfMessage())
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError:
        return   # Connection.run: a 400 (or h11's hint) and the connection closed


if __name__ == "__main__":
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
