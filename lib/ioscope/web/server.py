"""The web tool's HTTP server: GET / (the page) and GET /data?since=N (the heat map's new columns, JSON);
nothing else (404), no other method (405). Binds 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class WebServer:
    def __init__(self, host: str, port: int, page: Callable[[], bytes], data: Callable[[int], dict[str, Any]]) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "ioscope-web"
            sys_version = ""

            def log_message(self, format: str, *args: Any) -> None:   # quiet: the terminal is the tool's
                outer.requests += 1

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline' "
                                 "'unsafe-eval'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if url.path == "/":
                    self._send(200, page(), "text/html; charset=utf-8")
                elif url.path == "/data":
                    try:
                        since = int(parse_qs(url.query).get("since", ["0"])[0])
                    except ValueError:
                        self._send(400, b"since: a number\n", "text/plain")
                        return
                    self._send(200, json.dumps(data(since)).encode(), "application/json")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def do_POST(self) -> None:
                self._send(405, b"read only\n", "text/plain")

            do_PUT = do_DELETE = do_PATCH = do_POST

        self.requests = 0
        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


__all__ = ["WebServer"]
