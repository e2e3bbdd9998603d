/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * blktrace's codes, as struct trace_event (trace_event.h) carries them and
 * lib/ioscope/capture/events.py mirrors them (TA_*, TC_*): the action codes (BLK_TA_*, low 16 bits) and category bits
 * (BLK_TC_*) of include/uapi/linux/blktrace_api.h, and what the kernel's blk tracer
 * (kernel/trace/blktrace.c) computes from a request or bio: its categories, whether it is a
 * passthrough request, its error. Used by record and by agg's flags field.
 */
#ifndef BLKTRACE_BPF_H
#define BLKTRACE_BPF_H

#include <asm-generic/errno.h>
#include "core_fixes.bpf.h"

/* Actions (BLK_TA_*) */
#define IOS_TA_QUEUE 1
#define IOS_TA_BACKMERGE 2
#define IOS_TA_FRONTMERGE 3
#define IOS_TA_GETRQ 4
#define IOS_TA_REQUEUE 6
#define IOS_TA_ISSUE 7
#define IOS_TA_COMPLETE 8
#define IOS_TA_PLUG 9
#define IOS_TA_UNPLUG_IO 10
#define IOS_TA_UNPLUG_TIMER 11
#define IOS_TA_INSERT 12
#define IOS_TA_SPLIT 13
#define IOS_TA_REMAP 15

/* Categories (BLK_TC_*) */
#define IOS_TC_READ (1 << 0)
#define IOS_TC_WRITE (1 << 1)
#define IOS_TC_FLUSH (1 << 2)
#define IOS_TC_SYNC (1 << 3)
#define IOS_TC_QUEUE (1 << 4)
#define IOS_TC_REQUEUE (1 << 5)
#define IOS_TC_ISSUE (1 << 6)
#define IOS_TC_COMPLETE (1 << 7)
#define IOS_TC_FS (1 << 8)
#define IOS_TC_PC (1 << 9)
#define IOS_TC_NOTIFY (1 << 10) /* ioscope's process notes (trace_event.h), as blktrace's */
#define IOS_TC_AHEAD (1 << 11)
#define IOS_TC_META (1 << 12)
#define IOS_TC_DISCARD (1 << 13)
#define IOS_TC_FUA (1 << 15)

/*
 * The category bits of a request or bio's op and flags, as the blk tracer computes them: READ or
 * WRITE by data direction, SYNC, AHEAD, META, FLUSH (preflush), FUA from the flag bits, DISCARD
 * for (secure) discards and FLUSH for a bare flush.
 */
static __always_inline __u16 opf_to_tc(__u32 opf)
{
	__u32 op = opf & IOS_REQ_OP_MASK;
	__u16 tc = (op & 1) ? IOS_TC_WRITE : IOS_TC_READ; /* op_is_write(): odd ops write */

	if (opf & IOS_REQ_FLAG(__REQ_SYNC))
		tc |= IOS_TC_SYNC;
	if (opf & IOS_REQ_FLAG(__REQ_RAHEAD))
		tc |= IOS_TC_AHEAD;
	if (opf & IOS_REQ_FLAG(__REQ_META))
		tc |= IOS_TC_META;
	if (opf & IOS_REQ_FLAG(__REQ_PREFLUSH))
		tc |= IOS_TC_FLUSH;
	if (opf & IOS_REQ_FLAG(__REQ_FUA))
		tc |= IOS_TC_FUA;
	if (op == IOS_REQ_OP(REQ_OP_DISCARD) || op == IOS_REQ_OP(REQ_OP_SECURE_ERASE))
		tc |= IOS_TC_DISCARD;
	if (op == IOS_REQ_OP(REQ_OP_FLUSH))
		tc |= IOS_TC_FLUSH;
	return tc;
}

/* Driver-private (passthrough) requests carry no sector (blk_rq_is_passthrough). */
static __always_inline bool opf_is_passthrough(__u32 opf)
{
	__u32 op = opf & IOS_REQ_OP_MASK;

	return op == IOS_REQ_OP(REQ_OP_DRV_IN) || op == IOS_REQ_OP(REQ_OP_DRV_OUT);
}

/*
 * blk_status_t -> -errno, as blk_status_to_errno() does (block/blk-core.c, blk_errors[]). The
 * BLK_STS_* codes are #defines, invisible to BTF; these have been stable since 4.13. Unknown
 * codes map to -EIO like the kernel's.
 */
static __always_inline int blk_status_errno(__u8 sts)
{
	switch (sts) {
	case 0: return 0;
	case 1: return -EOPNOTSUPP; /* BLK_STS_NOTSUPP */
	case 2: return -ETIMEDOUT;  /* BLK_STS_TIMEOUT */
	case 3: return -ENOSPC;     /* BLK_STS_NOSPC */
	case 4: return -ENOLINK;    /* BLK_STS_TRANSPORT */
	case 5: return -EREMOTEIO;  /* BLK_STS_TARGET */
	case 7: return -ENODATA;    /* BLK_STS_MEDIUM */
	case 8: return -EILSEQ;     /* BLK_STS_PROTECTION */
	case 9: return -ENOMEM;     /* BLK_STS_RESOURCE */
	case 12: return -EAGAIN;    /* BLK_STS_AGAIN */
	case 13: return -EBUSY;     /* BLK_STS_DEV_RESOURCE */
	default: return -EIO;       /* BLK_STS_IOERR and the rest */
	}
}

#endif /* BLKTRACE_BPF_H */
