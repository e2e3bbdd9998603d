"""Fuzz target http: the exporter's HTTP request parsing, as a connection does it (lib/ioscope/tools/exporter/
server.py: h11 with the server's head bound, then Server.answer: the target, the query's name[], Accept,
Accept-Encoding, Authorization), over the bytes a client sends; the answers are written back through h11.
A request it cannot parse is a 400 from h11's RemoteProtocolError, as Connection.run answers it; anything
else raised is the finding."""

import asyncio
import sys

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


def one(data: bytes) -> None:
    """Any exception raised is a finding. (Its first two, an Accept header's openmetrics version that is not a
    number raising TypeError in prometheus_client's choose_encoder, and that version echoed with control bytes
    into the Content-Type, are fixed by server.negotiate and kept in tests/test_reader_regressions.py.)"""
    _one(data)


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
            conn.send(h11.Response(status_code=r.status, headers=[*r.headers, ("Content-Length", str(len(r.body)))]))

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
