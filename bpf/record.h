/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Constants shared by bpf/record.bpf.c and lib/ioscope/trace/record.py
 * (the event record itself is struct trace_event in trace_event.h).
 */
#ifndef RECORD_H
#define RECORD_H

/* Per-CPU counters in the rec_stats map, indexed by these values. */
enum rec_stat {
	IOS_REC_LOST_EVENT = 0,   /* ring buffer full: an event was dropped */
	IOS_REC_LOST_NOTE = 1,    /* ring buffer full: a process note was dropped */
	IOS_REC_PID_MAP_FULL = 2, /* -p: a tracked bio could not be remembered */
	IOS_REC_WAKEUPS = 3,      /* forced consumer wake-ups */
	IOS_REC_NR_STATS = 4,
};

#define IOS_REC_MAX_DISKS 16  /* -d filters */
#define IOS_REC_COMM_SLOTS 16 /* per-CPU cache of recently seen (pid, comm) */

#endif /* RECORD_H */
