"""Block-layer event traces: record, snoop, parse, report, export, import."""
