"""ioscope import: blktrace files as a capture."""
