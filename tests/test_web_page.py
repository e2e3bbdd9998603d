"""ioscope web's page and server without the kernel side: a LiveHeat filled with known columns, served by the
real server on 127.0.0.1, opened in headless Chromium (only that address reachable): the drawn cells add up to
what was put in, per process when split by process; only / and /data are served."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from ioscope.base import hist
from ioscope.tools.web.model import LiveHeat
from ioscope.tools.web.page import render
from ioscope.tools.web.server import app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _counts(pairs: dict[int, int]) -> np.ndarray:
    c = np.zeros(hist.NBUCKETS, np.uint64)
    for v, n in pairs.items():
        c[hist.bucket_index(v)] += n
    return c


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium") and not os.environ.get("CI"),
                    reason="no /usr/bin/chromium (scripts/bootstrap.sh --test installs it)")
def test_live_page_draws_what_the_server_holds() -> None:
    from ioscope.base.http import serve
    heat = LiveHeat(columns=60)
    now = time.time()
    fio = ("loop0", "read", "fio", "?")
    dd = ("loop0", "write", "dd", "?")
    for i in range(5):
        heat.add(now - 5 + i, 1.0, [("q2c", fio, _counts({50_000: 100 + i, 2_000_000: 1})),
                                    ("d2c", fio, _counts({40_000: 100 + i})),
                                    ("q2c", dd, _counts({300_000: 7}))])
    page = render(heat.columns, "test")
    server, _t = serve("127.0.0.1", free_port(), app(lambda: page, heat.to_json, [0]), "web-test")
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}/"
    try:
        assert _get(url + "nothing") == 404 and _get(url + "data?since=x") == 400
        data = json.loads(urllib.request.urlopen(url + "data?since=3", timeout=5).read())
        assert [c["seq"] for c in data["data"]] == [4, 5]
        from ioscope.engines.pages.browser import chromium, open_page
        with chromium(offline=False, allow=(url,)) as ctx:
            o = open_page(ctx, url, "window.ioscopeLive && (window.ioscopeLive.polls >= 1 || window.ioscopeLive.error)",
                          allow=(url,))
            assert o.page.evaluate("window.ioscopeLive.error") is None
            assert not o.errors and not o.requests, (o.errors, o.requests)
            q2c = sum(100 + i + 1 for i in range(5)) + 5 * 7
            assert sum(int(x["n"]) for x in o.marks("live", "live")) == q2c
            o.page.select_option("select[name=split]", "comm")
            o.page.wait_for_function("window.ioscopeLive.polls >= 2")
            per: dict[str, int] = {}
            for x in o.marks("live", "live"):
                per[x["part"]] = per.get(x["part"], 0) + int(x["n"])
            assert per == {"fio": q2c - 35, "dd": 35}
            o.page.select_option("select[name=phase]", "1")
            o.page.wait_for_function("window.ioscopeLive.polls >= 3")
            assert sum(int(x["n"]) for x in o.marks("live", "live")) == sum(100 + i for i in range(5))
            assert o.inked("#live", 0.001) > 0.001
    finally:
        server.shutdown()
        server.server_close()
