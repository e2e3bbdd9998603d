"""Open a page in headless Chromium (Debian's chromium, driven by Playwright) with the network cut, as the
test suite and bench/pages_speed.py look at pages: console errors, requests attempted, the drawn marks."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

CHROMIUM = "/usr/bin/chromium"
# Chromium's own background traffic (updates, sync, metrics) would meet the closed network: off
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
        "--metrics-recording-only"]

# the marks of one named Vega view: every item drawn, with its datum (JS run in the page)
MARKS_JS = """([view, mark]) => {
  const v = view === 'live' ? window.ioscopeLive.view : window.ioscopeViews[view];
  const out = [];
  const walk = (node) => {
    if (!node) return;
    if (node.marktype && node.marktype !== 'group' && node.name && node.name.startsWith(mark) && node.items) {
      for (const it of node.items) if (it.datum) out.push(Object.assign({}, it.datum));
    }
    for (const it of (node.items || [])) walk(it);
  };
  walk(v.scenegraph().root);
  return out;
}"""


# the share of the canvas pixels of an element that are not white: a picture was drawn (a canvas not sized
# yet, 0 wide or high, holds none: getImageData would throw)
INKED_JS = """(sel) => {
  let ink = 0, all = 0;
  for (const c of document.querySelectorAll(sel + ' canvas')) {
    if (!c.width || !c.height) continue;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    for (let i = 0; i < d.length; i += 4) {
      all++;
      if (d[i + 3] && (d[i] < 250 || d[i + 1] < 250 || d[i + 2] < 250)) ink++;
    }
  }
  return all ? ink / all : 0;
}"""


@dataclass
class Opened:
    page: Any
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def inked(self, selector: str, least: float = 0.0, timeout_s: float = 30.0) -> float:
        """The share of the element's canvas pixels drawn; with least, waited for (up to timeout_s) to pass
        least first: a loaded machine's browser sizes and draws a canvas after the page said ready (a
        canvas 0 wide once in CI beside the hogs)."""
        if least > 0:
            from playwright.sync_api import TimeoutError as PlaywrightTimeout
            try:
                self.page.wait_for_function(f"([sel, least]) => ({INKED_JS})(sel) > least", arg=[selector, least],
                                            timeout=timeout_s * 1000)
            except PlaywrightTimeout:
                pass   # the value says how far it got
        return float(self.page.evaluate(INKED_JS, selector))

    def marks(self, view: str, mark: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self.page.evaluate(MARKS_JS, [view, mark])
        return out


@contextmanager
def chromium(offline: bool = True, allow: tuple[str, ...] = ("file:",)) -> Iterator[Any]:
    """A browser context (fresh profile, deleted after); requests to anything but allow are refused."""
    from playwright.sync_api import sync_playwright
    profile = tempfile.mkdtemp(prefix="ioscope-chromium-")
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=ARGS,
                                                       offline=offline, viewport={"width": 1200, "height": 900})
            try:
                def route(r: Any) -> None:
                    if r.request.url.startswith(allow):
                        r.continue_()
                    else:
                        r.abort()
                ctx.route("**/*", route)
                yield ctx
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def open_page(ctx: Any, url: str, ready_js: str = "document.body.dataset.ready >= 1 || document.body.dataset.error",
              timeout_s: float = 60.0, allow: tuple[str, ...] = ("file:",)) -> Opened:
    page = ctx.new_page()
    o = Opened(page)
    page.on("console", lambda m: o.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: o.errors.append(str(e)))
    page.on("request", lambda r: o.requests.append(r.url) if not r.url.startswith(allow) else None)
    t = time.perf_counter()
    page.goto(url)
    page.wait_for_function(ready_js, timeout=timeout_s * 1000)
    o.seconds = time.perf_counter() - t
    return o


__all__ = ["ARGS", "CHROMIUM", "Opened", "chromium", "open_page"]
