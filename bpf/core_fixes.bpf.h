/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The kernel shims: reads of kernel structs, enums and flags that differ between the kernels
 * ioscope runs on, each citing the kernel commit that forced it. Differences are resolved with
 * CO-RE relocations (field, type and enum value existence) or by user space choosing program
 * variants from BTF before load; never by comparing kernel version numbers. Everything here is
 * what the kernel has; what ioscope makes of it is elsewhere (block.bpf.h, blktrace.bpf.h).
 * Each accessor takes btf, the constant of its program (twins.bpf.h: tp_btf or raw_tp).
 */
#ifndef CORE_FIXES_BPF_H
#define CORE_FIXES_BPF_H

#include "twins.bpf.h"

/*
 * The disk a bio is aimed at. Commit 309dca309fc3 ("block: store a block_device pointer in
 * struct bio", 5.12) replaced bio->bi_disk with bio->bi_bdev.
 */
struct bio___old {
	struct gendisk *bi_disk;
} __attribute__((preserve_access_index));

static __always_inline struct gendisk *bio_disk(struct bio *bio, const bool btf)
{
	struct bio___old *old = (void *)bio;

	if (bpf_core_field_exists(old->bi_disk))
		return IOS_READ(btf, old, bi_disk);
	return IOS_READ(btf, bio, bi_bdev, bd_disk);
}

/*
 * The whole disk a request belongs to. Commit f3fa33acca9f ("block: remove the ->rq_disk field
 * in struct request", 5.17) removed request->rq_disk: since then the disk is reached through the
 * queue (request_queue->disk, from d152c682f03c, below). Older kernels keep rq_disk, preferred
 * where it exists.
 */
struct request___old {
	struct gendisk *rq_disk;
} __attribute__((preserve_access_index));

static __always_inline struct gendisk *rq_disk(struct request *rq, const bool btf)
{
	struct request___old *old = (void *)rq;

	if (bpf_core_field_exists(old->rq_disk))
		return IOS_READ(btf, old, rq_disk);
	return IOS_READ(btf, rq, q, disk);
}

/*
 * The disk of a request queue, for block_plug/block_unplug which name only the queue. Commit
 * d152c682f03c ("block: add an explicit ->disk backpointer to the request_queue", 5.15) added
 * request_queue->disk; without it the disk is unknown (NULL) and such events are not filtered
 * by disk.
 */
struct request_queue___new {
	struct gendisk *disk;
} __attribute__((preserve_access_index));

static __always_inline struct gendisk *queue_disk(struct request_queue *q, const bool btf)
{
	struct request_queue___new *nq = (void *)q;

	if (bpf_core_field_exists(nq->disk))
		return IOS_READ(btf, nq, disk);
	return NULL;
}

/*
 * A request or bio's op is the low REQ_OP_BITS (8) bits of its cmd_flags/bi_opf and its flags
 * are the bits above, numbered by enum req_flag_bits: commit ef295ecf090d ("block: better op and
 * flags encoding", 4.10).
 */
#define IOS_REQ_OP_MASK 0xff

/*
 * REQ_OP_* values, through CO-RE enum relocations: they are kernel ABI only by convention. Commit
 * ff07a02e9e8e ("treewide: Rename enum req_opf into enum req_op", 6.0) renamed their enum;
 * IOS_REQ_OP(NAME) reads whichever this kernel has (libbpf ignores a flavour's ___old suffixes
 * when it matches names).
 */
enum req_opf___old {
	REQ_OP_READ___old, REQ_OP_WRITE___old, REQ_OP_FLUSH___old, REQ_OP_DISCARD___old,
	REQ_OP_SECURE_ERASE___old, REQ_OP_WRITE_ZEROES___old, REQ_OP_DRV_IN___old, REQ_OP_DRV_OUT___old,
};

#define IOS_REQ_OP(NAME)								\
	(bpf_core_enum_value_exists(enum req_op, NAME) ? bpf_core_enum_value(enum req_op, NAME)	\
						       : bpf_core_enum_value(enum req_opf___old, NAME##___old))

/*
 * The bit of REQ_<NAME> in cmd_flags/bi_opf, __REQ_<NAME>'s value in enum req_flag_bits, through a
 * CO-RE enum relocation: a flag added or removed renumbers every flag after it (as commit
 * 2771cefeac49, "block: remove the REQ_NOWAIT_INLINE flag", did).
 */
#define IOS_REQ_FLAG(NAME) (1u << bpf_core_enum_value(enum req_flag_bits, NAME))

/*
 * When the block layer started timing the request (the start of the await in /proc/diskstats)
 * and when it issued it to the driver (stamped in blk_mq_start_request() on queues that keep
 * I/O statistics, QUEUE_FLAG_STATS: set by wbt, kyber, bfq, iocost, iolatency). Both fields
 * arrived with commit 522a777566f5 ("block: consolidate struct request timestamp fields", 4.17);
 * before it start_time was in jiffies under another name: 0 there, and the caller falls back to
 * its own time. The fields are valid only when the flags below say so.
 */
static __always_inline __u64 rq_start_ns(struct request *rq, const bool btf)
{
	if (bpf_core_field_exists(rq->start_time_ns))
		return IOS_READ(btf, rq, start_time_ns);
	return 0;
}

static __always_inline __u64 rq_io_start_ns(struct request *rq, const bool btf)
{
	if (bpf_core_field_exists(rq->io_start_time_ns))
		return IOS_READ(btf, rq, io_start_time_ns);
	return 0;
}

/*
 * The bytes of the request as blk_mq_start_request() noted them at issue on a queue that keeps
 * I/O statistics (rq->stats_sectors is not consumed by completions as __data_len is); 0 where it
 * did not, or where the field does not exist: commit 3d2443069407 ("block: make rq sector size
 * accessible for block stats", 5.4) added it.
 */
static __always_inline __u32 rq_stats_bytes(struct request *rq, const bool btf)
{
	if (bpf_core_field_exists(rq->stats_sectors))
		return (__u32)IOS_READ(btf, rq, stats_sectors) << 9;
	return 0;
}

/*
 * Request flags (rq->rq_flags): commit 5f89154e8e9e ("block: Use enum to define RQF_x bit
 * indexes", 6.11) made them values of enum rqf_flags. Before it they are #defines BTF cannot see,
 * and IOS_RQF reads them as not set.
 */
#define IOS_RQF(rq_flags, NAME)                                          \
	(bpf_core_enum_value_exists(enum rqf_flags, NAME) &&              \
	 ((rq_flags) & (1u << bpf_core_enum_value(enum rqf_flags, NAME))))

/*
 * A request with data in the flush sequence (a PREFLUSH/FUA write the device cannot do in one
 * command) is reported complete twice: when its data step ends (RQF_FLUSH_SEQ set, its bios not
 * ended yet) and again when the whole sequence ends (flag cleared, bios ended). Where the flag
 * cannot be read, the data step is counted like any completion.
 */
static __always_inline bool rq_flush_seq(__u32 rq_flags)
{
	return IOS_RQF(rq_flags, __RQF_FLUSH_SEQ);
}

/*
 * Whether the kernel stamped this request's start (start_time_ns) and its issue
 * (io_start_time_ns). The fields are not cleared when unused: a request the kernel does not
 * account (iostats off, no scheduler) keeps the stale start of an earlier use of the same tag
 * (seen here: seconds old). Only the flags say: RQF_IO_STAT (accounted in /proc/diskstats, from
 * start_time_ns) and RQF_STATS (blk_mq_start_request stamped io_start_time_ns). Where the flags
 * cannot be read, a request reads as not stamped.
 */
static __always_inline bool rq_start_stamped(__u32 rq_flags)
{
	return IOS_RQF(rq_flags, __RQF_IO_STAT);
}

static __always_inline bool rq_issue_stamped(__u32 rq_flags)
{
	return IOS_RQF(rq_flags, __RQF_STATS);
}

/* The request's start as the kernel stamped it, 0 when it did not. */
static __always_inline __u64 rq_start_if_stamped(struct request *rq, const bool btf)
{
	if (!rq_start_stamped(IOS_READ(btf, rq, rq_flags)))
		return 0;
	return rq_start_ns(rq, btf);
}

#endif /* CORE_FIXES_BPF_H */
