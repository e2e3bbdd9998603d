"""ioscope demo: lat on a built-in workload (cmd.py); the readahead study (readahead.py, reader.py)."""
