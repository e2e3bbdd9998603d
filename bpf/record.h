/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Constants shared by bpf/record.bpf.c and lib/ioscope/engines/recording/recorder.py
 * (the event record itself is struct trace_event in trace_event.h).
 */
#ifndef RECORD_H
#define RECORD_H

/* Per-CPU counters in the rec_stats map, indexed by these values. */
enum rec_stat {
	IOS_REC_LOST_EVENT = 0,   /* ring buffer full: an event was dropped */
	IOS_REC_LOST_NOTE = 1,    /* ring buffer full: a process note was dropped */
	IOS_REC_PID_MAP_FULL = 2, /* -p: a tracked bio could not be remembered */
	IOS_REC_LOST_NEST = 3,    /* more than IOS_REC_LEVELS programs nested on a CPU: event dropped */
	IOS_REC_RING_RACE = 4,    /* two programs wrote one ring (impossible by design; checked) */
	IOS_REC_LOST_NO_RING = 5, /* event on a CPU that was not present at the start: no ring */
	IOS_REC_NR_STATS = 6,
};

/* Rings per CPU: one per context level (task, softirq, hardirq). */
#define IOS_REC_LEVELS 3

/* Position of one ring (struct trace_event slots in rec_ring): head advanced by the
 * BPF program that owns the ring, tail by the consumer; on separate cache lines. */
struct rec_ring_pos {
	__u64 head;
	__u64 pad0[7];
	__u64 tail;
	__u64 pad1[7];
};

#define IOS_REC_COMM_SLOTS 16 /* per-CPU cache of recently seen (pid, comm) */

#endif /* RECORD_H */
