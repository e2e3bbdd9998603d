"""Readahead, read sizes and per-process balance: ioscope readsize, readahead and fair."""
