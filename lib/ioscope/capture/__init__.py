"""Captures: the store (an Arrow IPC file, store.py), the event layout (events.py), blktrace's binary
format (blktrace.py), its import (importer.py), the collect bundle (bundle.py), and one way to open any
of them (offline.py)."""
