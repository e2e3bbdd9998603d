/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Every kernel-difference shim ioscope needs, in one place. Each one says
 * why it exists. Differences are resolved with CO-RE relocations (field,
 * type and enum existence) or by user space choosing program variants from
 * BTF before load; never by comparing kernel version numbers.
 */
#ifndef CORE_FIXES_BPF_H
#define CORE_FIXES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include "ioscope.h"

#define IOSCOPE_MKDEV(ma, mi) (((__u32)(ma) << 20) | (__u32)(mi))

/*
 * The whole disk a request belongs to. Linux 5.17 removed request->rq_disk
 * (commit f3fa33acca9f); the disk is reached through the queue since then.
 * Older kernels keep rq_disk, which we prefer when it exists.
 */
struct request___old {
	struct gendisk *rq_disk;
} __attribute__((preserve_access_index));

static __always_inline struct gendisk *rq_disk(struct request *rq)
{
	struct request___old *old = (void *)rq;

	if (bpf_core_field_exists(old->rq_disk))
		return BPF_CORE_READ(old, rq_disk);
	return BPF_CORE_READ(rq, q, disk);
}

static __always_inline __u32 disk_dev(struct gendisk *disk)
{
	if (!disk)
		return 0;
	return IOSCOPE_MKDEV(BPF_CORE_READ(disk, major), BPF_CORE_READ(disk, first_minor));
}

/*
 * The disk a bio is aimed at. bio->bi_bdev replaced bio->bi_disk in 5.12
 * (commit 309dca309fc3); before that the bio pointed at the gendisk.
 */
struct bio___old {
	struct gendisk *bi_disk;
} __attribute__((preserve_access_index));

static __always_inline struct gendisk *bio_disk(struct bio *bio)
{
	struct bio___old *old = (void *)bio;

	if (bpf_core_field_exists(old->bi_disk))
		return BPF_CORE_READ(old, bi_disk);
	return BPF_CORE_READ(bio, bi_bdev, bd_disk);
}

/*
 * Only blk-mq (request based) queues go through issue and completion of a
 * request. Bio-based drivers (zram, dm, md) would leave per-bio state behind
 * that nothing ever removes, so they are skipped and counted in user space.
 */
static __always_inline bool disk_is_mq(struct gendisk *disk)
{
	return BPF_CORE_READ(disk, queue, mq_ops) != NULL;
}

/*
 * REQ_OP_* and the __REQ_PREFLUSH bit are enum values whose numbers are
 * kernel ABI only by convention; read them through CO-RE enum relocations.
 * The ops' enum is `enum req_op` in 6.1 and later, `enum req_opf` in 5.10;
 * IOS_REQ_OP(NAME) reads whichever this kernel has (libbpf ignores the
 * flavour's ___old suffixes when it matches names).
 */
enum req_opf___old {
	REQ_OP_READ___old, REQ_OP_WRITE___old, REQ_OP_FLUSH___old, REQ_OP_DISCARD___old,
	REQ_OP_SECURE_ERASE___old, REQ_OP_WRITE_ZEROES___old, REQ_OP_DRV_IN___old, REQ_OP_DRV_OUT___old,
};

#define IOS_REQ_OP(NAME)								\
	(bpf_core_enum_value_exists(enum req_op, NAME) ? bpf_core_enum_value(enum req_op, NAME)	\
						       : bpf_core_enum_value(enum req_opf___old, NAME##___old))

static __always_inline __u8 opf_to_op(__u32 opf, __u32 bytes)
{
	__u32 op = opf & 0xff; /* REQ_OP_MASK: (1 << REQ_OP_BITS) - 1, 8 bits since 4.10 */
	__u32 preflush = 1u << bpf_core_enum_value(enum req_flag_bits, __REQ_PREFLUSH);

	if (op == IOS_REQ_OP(REQ_OP_READ))
		return IOS_OP_READ;
	if (op == IOS_REQ_OP(REQ_OP_WRITE)) {
		/* an empty write carrying only PREFLUSH is fsync's cache flush */
		if (bytes == 0 && (opf & preflush))
			return IOS_OP_FLUSH;
		return IOS_OP_WRITE;
	}
	if (op == IOS_REQ_OP(REQ_OP_WRITE_ZEROES))
		return IOS_OP_WRITE;
	if (op == IOS_REQ_OP(REQ_OP_FLUSH))
		return IOS_OP_FLUSH;
	if (op == IOS_REQ_OP(REQ_OP_DISCARD) || op == IOS_REQ_OP(REQ_OP_SECURE_ERASE))
		return IOS_OP_DISCARD;
	return IOS_OP_OTHER;
}

/*
 * Readahead bios carry REQ_RAHEAD (blkparse's 'A'). The bit number is an enum
 * value (__REQ_RAHEAD) that moved as flags were added; read it through CO-RE.
 */
static __always_inline bool bio_is_readahead(__u32 opf)
{
	return opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_RAHEAD));
}

/*
 * REQ_NOWAIT: the submitter (io_uring, RWF_NOWAIT) would rather have the bio
 * fail than wait for a request, so the block layer may end it without ever
 * making it one (no free tag: bio_wouldblock_error()). A bio without it ends
 * only through its request's completion.
 */
static __always_inline bool bio_is_nowait(__u32 opf)
{
	return opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_NOWAIT));
}

/*
 * When the block layer started timing the request (the start of the await
 * in /proc/diskstats), 0 when it did not stamp it (no I/O accounting and no
 * scheduler). Kernels before 4.17 (commit 522a777566f5) had start_time in
 * jiffies under another name: there the caller falls back to its own time.
 */
static __always_inline __u64 rq_start_ns(struct request *rq)
{
	if (bpf_core_field_exists(rq->start_time_ns))
		return BPF_CORE_READ(rq, start_time_ns);
	return 0;
}

/*
 * When the request was issued to the driver, as the kernel stamps it in
 * blk_mq_start_request() on queues that keep I/O statistics
 * (QUEUE_FLAG_STATS: set by wbt, kyber, bfq, iocost, iolatency); 0 when it
 * did not. The field arrived with start_time_ns (4.17).
 */
static __always_inline __u64 rq_io_start_ns(struct request *rq)
{
	if (bpf_core_field_exists(rq->io_start_time_ns))
		return BPF_CORE_READ(rq, io_start_time_ns);
	return 0;
}

/*
 * The same shims as direct loads, for tp_btf programs only: their arguments
 * are BTF-typed pointers the verifier lets a program dereference (CO-RE
 * relocated, faults handled), which costs a load instead of a
 * bpf_probe_read_kernel() call per field. raw_tp programs must keep using
 * the BPF_CORE_READ versions above.
 */
static __always_inline struct gendisk *bio_disk_direct(struct bio *bio)
{
	struct bio___old *old = (void *)bio;

	if (bpf_core_field_exists(old->bi_disk))
		return old->bi_disk;
	return bio->bi_bdev->bd_disk;
}

static __always_inline struct gendisk *rq_disk_direct(struct request *rq)
{
	struct request___old *old = (void *)rq;

	if (bpf_core_field_exists(old->rq_disk))
		return old->rq_disk;
	return rq->q->disk;
}

static __always_inline __u32 disk_dev_direct(struct gendisk *disk)
{
	if (!disk)
		return 0;
	return IOSCOPE_MKDEV(disk->major, disk->first_minor);
}

static __always_inline bool disk_is_mq_direct(struct gendisk *disk)
{
	return disk->queue->mq_ops != NULL;
}

static __always_inline __u64 rq_start_ns_direct(struct request *rq)
{
	if (bpf_core_field_exists(rq->start_time_ns))
		return rq->start_time_ns;
	return 0;
}

static __always_inline __u64 rq_io_start_ns_direct(struct request *rq)
{
	if (bpf_core_field_exists(rq->io_start_time_ns))
		return rq->io_start_time_ns;
	return 0;
}

/*
 * A request with data in the flush sequence (a PREFLUSH/FUA write the device
 * cannot do in one command) is reported complete twice: when its data step
 * ends (RQF_FLUSH_SEQ set, its bios not ended yet) and again when the whole
 * sequence ends (flag cleared, bios ended). Recent kernels have the flag as
 * a value of enum rqf_flags; older ones as a #define BTF cannot see, where
 * it reads as not set (and the data step is counted like any completion).
 */
static __always_inline bool rq_flush_seq(__u32 rq_flags)
{
	if (!bpf_core_enum_value_exists(enum rqf_flags, __RQF_FLUSH_SEQ))
		return false;
	return rq_flags & (1u << bpf_core_enum_value(enum rqf_flags, __RQF_FLUSH_SEQ));
}

/*
 * Whether the kernel stamped this request's start (start_time_ns) and its
 * issue (io_start_time_ns). The fields are not cleared when unused: a request
 * the kernel does not account (iostats off, no scheduler) keeps the stale
 * start of an earlier use of the same tag (seen here: seconds old). Only the
 * flags say: RQF_IO_STAT (accounted in /proc/diskstats, from start_time_ns)
 * and RQF_STATS (blk_mq_start_request stamped io_start_time_ns). Kernels that
 * have them as #defines BTF cannot see read as not stamped.
 */
static __always_inline bool rq_start_stamped(__u32 rq_flags)
{
	if (!bpf_core_enum_value_exists(enum rqf_flags, __RQF_IO_STAT))
		return false;
	return rq_flags & (1u << bpf_core_enum_value(enum rqf_flags, __RQF_IO_STAT));
}

static __always_inline bool rq_issue_stamped(__u32 rq_flags)
{
	if (!bpf_core_enum_value_exists(enum rqf_flags, __RQF_STATS))
		return false;
	return rq_flags & (1u << bpf_core_enum_value(enum rqf_flags, __RQF_STATS));
}

/* The request's start as the kernel stamped it, 0 when it did not. */
static __always_inline __u64 rq_start_if_stamped(struct request *rq, const bool btf)
{
	__u32 rq_flags = btf ? rq->rq_flags : BPF_CORE_READ(rq, rq_flags);

	if (!rq_start_stamped(rq_flags))
		return 0;
	return btf ? rq_start_ns_direct(rq) : rq_start_ns(rq);
}

/*
 * The disk of a request queue, for block_plug/block_unplug which name only
 * the queue. request_queue->disk arrived in 5.15 (commit d152c682f03c);
 * without it the disk is unknown (0) and such events are not filtered by disk.
 */
struct request_queue___new {
	struct gendisk *disk;
} __attribute__((preserve_access_index));

static __always_inline struct gendisk *queue_disk(struct request_queue *q)
{
	struct request_queue___new *nq = (void *)q;

	if (bpf_core_field_exists(nq->disk))
		return BPF_CORE_READ(nq, disk);
	return NULL;
}

static __always_inline struct gendisk *queue_disk_direct(struct request_queue *q)
{
	struct request_queue___new *nq = (void *)q;

	if (bpf_core_field_exists(nq->disk))
		return nq->disk;
	return NULL;
}

/*
 * blktrace's category bits (BLK_TC_*, include/uapi/linux/blktrace_api.h)
 * from a request or bio's op and flags, as the kernel's blk tracer computes
 * them: READ or WRITE by data direction, SYNC, AHEAD, META, FLUSH (preflush),
 * FUA from the flag bits, DISCARD for (secure) discards and FLUSH for a bare
 * flush. The flag bit numbers come from CO-RE enum relocations.
 */
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
#define IOS_TC_AHEAD (1 << 11)
#define IOS_TC_META (1 << 12)
#define IOS_TC_DISCARD (1 << 13)
#define IOS_TC_FUA (1 << 15)

static __always_inline __u16 opf_to_tc(__u32 opf)
{
	__u32 op = opf & 0xff;
	__u16 tc = (op & 1) ? IOS_TC_WRITE : IOS_TC_READ; /* op_is_write(): odd ops write */

	if (opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_SYNC)))
		tc |= IOS_TC_SYNC;
	if (opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_RAHEAD)))
		tc |= IOS_TC_AHEAD;
	if (opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_META)))
		tc |= IOS_TC_META;
	if (opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_PREFLUSH)))
		tc |= IOS_TC_FLUSH;
	if (opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_FUA)))
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
	__u32 op = opf & 0xff;

	return op == IOS_REQ_OP(REQ_OP_DRV_IN) || op == IOS_REQ_OP(REQ_OP_DRV_OUT);
}

/*
 * blk_status_t -> -errno, as blk_status_to_errno() does (block/blk-core.c,
 * blk_errors[]). The BLK_STS_* codes are #defines, invisible to BTF; these
 * have been stable since 4.13. Unknown codes map to -EIO like the kernel's.
 */
static __always_inline int blk_status_errno(__u8 sts)
{
	switch (sts) {
	case 0: return 0;
	case 1: return -95;  /* NOTSUPP: EOPNOTSUPP */
	case 2: return -110; /* TIMEOUT: ETIMEDOUT */
	case 3: return -28;  /* NOSPC: ENOSPC */
	case 4: return -67;  /* TRANSPORT: ENOLINK */
	case 5: return -121; /* TARGET: EREMOTEIO */
	case 7: return -61;  /* MEDIUM: ENODATA */
	case 8: return -84;  /* PROTECTION: EILSEQ */
	case 9: return -12;  /* RESOURCE: ENOMEM */
	case 12: return -11; /* AGAIN: EAGAIN */
	case 13: return -16; /* DEV_RESOURCE: EBUSY */
	default: return -5;  /* IOERR and the rest: EIO */
	}
}

/*
 * Linux 5.10's block tracepoints pass the request_queue first: block_bio_queue
 * (q, bio), block_rq_issue (q, rq), block_split (q, bio, new_sector), ...
 * Christoph Hellwig's series "remove the request_queue argument to the block_*
 * tracepoints" (5.11) took it out. A tp_btf program is typed by its
 * tracepoint's arguments and a raw_tp program may read no more arguments than
 * the tracepoint has, so each signature needs its own program:
 * IOS_BLOCK_TP(hook, tp, CALL, args...) defines btf_<hook>(args) and
 * raw_<hook>(args), and btf_<hook>__q(q, args) and raw_<hook>__q(q, args);
 * CALL(btf) is the body, an expression over the names in args. The loader
 * (lib/ioscope/kernel/loader.py) autoloads the __q ones where the kernel's BTF says
 * the tracepoint's first argument is a struct request_queue *.
 */
#define IOS_BLOCK_TP(hook, tp, CALL, args...)						\
	SEC("tp_btf/" #tp)								\
	int BPF_PROG(btf_##hook, args) { return CALL(true); }				\
	SEC("tp_btf/" #tp)								\
	int BPF_PROG(btf_##hook##__q, struct request_queue *ios_q_, args) { return CALL(true); } \
	SEC("raw_tp/" #tp)								\
	int BPF_PROG(raw_##hook, args) { return CALL(false); }				\
	SEC("raw_tp/" #tp)								\
	int BPF_PROG(raw_##hook##__q, struct request_queue *ios_q_, args) { return CALL(false); }

#endif /* CORE_FIXES_BPF_H */
