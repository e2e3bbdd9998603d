"""The web tool's HTTP side: GET / (the page) and GET /data?since=N (the heat map's columns after N, JSON);
404 for any other path, 405 for any other method. Bound and served by base/http.py
(--listen HOST:PORT, 127.0.0.1 unless told otherwise, a thread of its own, no line per request)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from ioscope.base.http import StartResponse, WSGIApp

HEADERS = [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"),
           ("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; "
                                       "style-src 'unsafe-inline'; connect-src 'self'; img-src data:")]


def app(page: Callable[[], bytes], data: Callable[[int], dict[str, Any]], counter: list[int]) -> WSGIApp:
    def serve(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        counter[0] += 1
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain; charset=utf-8"),
                                                      ("Allow", "GET, HEAD")])
            return [b"405 method not allowed\n"]
        if path == "/":
            body, ctype = page(), "text/html; charset=utf-8"
        elif path == "/data":
            try:
                since = int(parse_qs(environ.get("QUERY_STRING", "")).get("since", ["0"])[0])
            except ValueError:
                start_response("400 Bad Request", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"since: a number\n"]
            body, ctype = json.dumps(data(since)).encode(), "application/json"
        else:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"404 page not found\n"]
        start_response("200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body))), *HEADERS])
        return [body] if method == "GET" else []

    return serve


__all__ = ["app"]
