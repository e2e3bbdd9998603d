/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What ioscope reads of the block layer, over the kernel shims (core_fixes.bpf.h): a disk's dev_t,
 * whether it is blk-mq, a request or bio's operation as ioscope counts it (enum ios_io_op) and the
 * flags the tools look at. Accessors take btf, their program's constant (twins.bpf.h).
 */
#ifndef BLOCK_BPF_H
#define BLOCK_BPF_H

#include "core_fixes.bpf.h"
#include "ioscope.h"

#define IOSCOPE_MKDEV(ma, mi) (((__u32)(ma) << 20) | (__u32)(mi))

/* The kernel dev_t of a whole disk (major << 20 | minor), 0 for none. */
static __always_inline __u32 disk_dev(struct gendisk *disk, const bool btf)
{
	if (!disk)
		return 0;
	return IOSCOPE_MKDEV(IOS_READ(btf, disk, major), IOS_READ(btf, disk, first_minor));
}

static __always_inline __u32 rq_dev(struct request *rq, const bool btf)
{
	return disk_dev(rq_disk(rq, btf), btf);
}

/*
 * Only blk-mq (request based) queues go through issue and completion of a request. Bio-based
 * drivers (zram, dm, md) would leave per-bio state behind that nothing ever removes, so they are
 * skipped and counted in user space.
 */
static __always_inline bool disk_is_mq(struct gendisk *disk, const bool btf)
{
	return IOS_READ(btf, disk, queue, mq_ops) != NULL;
}

/* enum ios_io_op of a request or bio from its cmd_flags/bi_opf and size. */
static __always_inline __u8 opf_to_op(__u32 opf, __u32 bytes)
{
	__u32 op = opf & IOS_REQ_OP_MASK;
	__u32 preflush = IOS_REQ_FLAG(__REQ_PREFLUSH);

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

/* Readahead bios carry REQ_RAHEAD (blkparse's 'A'). */
static __always_inline bool bio_is_readahead(__u32 opf)
{
	return opf & IOS_REQ_FLAG(__REQ_RAHEAD);
}

/*
 * REQ_NOWAIT: the submitter (io_uring, RWF_NOWAIT) would rather have the bio fail than wait for a
 * request, so the block layer may end it without ever making it one (no free tag:
 * bio_wouldblock_error()). A bio without it ends only through its request's completion.
 */
static __always_inline bool bio_is_nowait(__u32 opf)
{
	return opf & IOS_REQ_FLAG(__REQ_NOWAIT);
}

#endif /* BLOCK_BPF_H */
