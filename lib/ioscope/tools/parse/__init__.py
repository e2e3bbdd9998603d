"""ioscope parse: a capture as blkparse prints it (blkparse.py)."""
