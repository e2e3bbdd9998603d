"""ioscope snoop: one line per completed I/O, live or from a capture."""
