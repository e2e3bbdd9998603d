"""Captures: the store (an Arrow IPC file, store.py), the event layout (events.py), blktrace's binary
format (blktrace.py), its import (importer.py), the collect bundle (bundle.py), and one way to open any
of them (offline.py). _tracecore (tracecore/*.c) is the C of the offline tools' sequential loops: record
scanning and event packing (scan.c, pack.c: blktrace.py, store.py), the pairing and btt's own rules
(pairing.c, bttsim.c, rbtree.c: engines/pairing), blkparse's lines (blkparse.c: tools/parse)."""
