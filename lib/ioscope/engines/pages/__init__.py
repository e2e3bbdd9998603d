"""Pages: a capture's I/O as pictures (latency heat maps, access pattern, scatter, curves, phases) in one
self-contained HTML file, and each picture as SVG or PNG (docs/pages.md).

cells.py aggregates the per-I/O table into bounded cells (numpy), figures.py turns cells into Vega-Lite
specifications, html.py assembles the page, static.py writes the pictures (vl-convert).
"""
