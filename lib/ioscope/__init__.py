"""ioscope: eBPF block I/O tracing toolkit."""

from ioscope._version import __version__

__all__ = ["__version__"]
