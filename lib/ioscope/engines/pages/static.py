"""Each picture of a page as a static file (SVG or PNG) for tickets and docs: the same Vega-Lite
specification as in the page, with the data inside, rendered by vl-convert (no browser needed)."""

from __future__ import annotations

import os
from typing import Any

from ioscope.base import outfile
from ioscope.base.errors import IoscopeError
from ioscope.engines.pages.figures import Table, rows_of
from ioscope.engines.pages.html import inline


def write_pictures(pics: dict[str, dict[str, Any]], data: dict[str, Table], directory: str, fmt: str) -> list[str]:
    """Write every picture as DIR/NAME.svg or .png (created 0600; DIR made 0700 if missing); the paths."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise IoscopeError(f"{directory} is not a directory", "give a directory for the pictures")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    paths = []
    for name, spec in pics.items():
        if "layer" in spec and not rows_of(data.get("marks", {})):
            # no marks: their empty layers left out (resvg took 40 s over a PNG of the empty rules)
            spec = dict(spec, layer=[x for x in spec["layer"] if x.get("data") != {"name": "marks"}])
        if "hconcat" in spec:   # the column-under-the-pointer panel is for a pointer: not in a picture
            spec = dict(spec, hconcat=[x for x in spec["hconcat"] if x.get("name") != "column"])
        path = os.path.join(directory, f"{name}.{fmt}")
        body = render(inline(spec, data), fmt)
        with outfile.open_private(path, "wb", force=True) as f:
            f.write(body)
        paths.append(path)
    return paths


def render(spec: dict[str, Any], fmt: str) -> bytes:
    """A specification with its data inside, as SVG or PNG bytes."""
    import vl_convert as vlc
    svg = vlc.vegalite_to_svg(spec)
    # PNG from the SVG: vegalite_to_png took 40 s on a picture svg_to_png turns in 0.2 s
    return svg.encode() if fmt == "svg" else bytes(vlc.svg_to_png(svg, scale=2))


__all__ = ["render", "write_pictures"]
