/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * One block-layer event as the recorder sends it through the ring buffer
 * and as captures store it (lib/ioscope/capture/events.py:EVENT mirrors it).
 * Fixed size so that a batch of ring-buffer bytes is a numpy array as is.
 *
 * action and category use blktrace's codes (BLK_TA_* low 16 bits and the
 * BLK_TC_* bits: blktrace.bpf.h), so export to blktrace version 7 is a field copy.
 *
 * Queue events (BLK_TA_QUEUE) carry in aux the id of the cgroup the bio is charged to (the io
 * controller's hierarchy: kernfs id = the directory's inode), flagged IOS_EV_CGROUP.
 *
 * Process notes: action 0 with category IOS_TC_NOTIFY carries the 16-byte
 * command name of pid/tgid in sector+aux (sent when a pid is first seen or
 * its name changes), the way blktrace sends its process notes.
 */
#ifndef TRACE_EVENT_H
#define TRACE_EVENT_H

struct trace_event {
	__u64 ts;       /* bpf_ktime_get_ns(): CLOCK_MONOTONIC ns */
	__u64 sector;   /* first sector (512 B); notes: comm[0..8] */
	__u64 aux;      /* split: new sector; remap: source sector; unplug: request count; notes: comm[8..16] */
	__u32 bytes;    /* size in bytes */
	__u32 dev;      /* kernel dev_t of the disk (major << 20 | minor) */
	__u32 aux_dev;  /* remap: source device */
	__u32 pid;      /* thread id of current (as blktrace) */
	__u32 tgid;     /* process id of current */
	__u16 cpu;
	__u16 error;
	__u16 action;   /* BLK_TA_* action code (1 QUEUE .. 17 DRV_DATA); 0 for notes */
	__u16 category; /* BLK_TC_* bits (1<<0 READ .. 1<<15 FUA) */
	__u32 flags;    /* IOS_EV_* */
};

#define IOS_EV_NOTE_PROCESS 1 /* a process note, see above */
#define IOS_EV_CGROUP 4       /* a queue event whose aux is the id of the cgroup its bio is charged to */

#endif /* TRACE_EVENT_H */
