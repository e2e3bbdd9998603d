/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The bios in flight, without a hash map: an array of slots indexed by a
 * hash of the bio pointer, each slot holding the pointer it belongs to.
 * Array lookups need no lock and no allocation, which is what keeps the
 * per-I/O cost low (a BPF hash map takes a bucket lock on every update and
 * delete). Two-way: a bio goes to its slot or the neighbour (idx ^ 1).
 * Used by lat, top and agg (rqpath.bpf.h).
 */
#ifndef INFLIGHT_BPF_H
#define INFLIGHT_BPF_H

#include "common.bpf.h"
#include "block.bpf.h"
#include "ptrval.bpf.h"

#define INFLIGHT_BITS 17
#define INFLIGHT_SLOTS (1 << INFLIGHT_BITS)
#define INFLIGHT_STALE_NS (120ULL * 1000000000ULL)

/*
 * A slot's d_ns when its bio is queued. 0 (not issued yet) in a tool with an issue program. A tool
 * without one (top) cannot see a bio issued, but it can see at queue whether the bio can end in any
 * other way than through its request (REQ_NOWAIT: block.bpf.h): for a bio that cannot, the slot
 * counts as issued from its queue (SLOT_ENDS_IN_RQ), so that a completion that never comes for it
 * is a lost one (the queue program's address check, inflight.py's pending gauge). Never a time: an
 * issue program's stamps are larger.
 */
#define SLOT_ENDS_IN_RQ 1ULL

static __always_inline __u64 slot_queued_d_ns(struct bio *bio, bool issue_prog, const bool btf)
{
	if (issue_prog)
		return 0;
	return bio_is_nowait(IOS_READ(btf, bio, bi_opf)) ? 0ULL : SLOT_ENDS_IN_RQ;
}

/* Mmapable (5.5+): user space reads the whole table as memory, not through a syscall dump that copies it
 * (a 4 MB dump cost ~30 ms of CPU; lib/ioscope/kernel/inflight.py SlotTable.slots). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, INFLIGHT_SLOTS);
	__type(key, __u32);
	__type(value, struct bio_slot);
} inflight SEC(".maps");

static __always_inline __u32 slot_of(__u64 bio)
{
	return (__u32)((bio * 0x9E3779B97F4A7C15ULL) >> (64 - INFLIGHT_BITS));
}


/* Two-way: a bio goes to its slot or the neighbour (idx ^ 1), whichever is
 * free, so a collision needs both taken. */
static __always_inline void slot_put(__u64 bio, __u64 q_ns, __u64 d_ns, __u32 tgid, __u32 dev)
{
	__u32 idx = slot_of(bio), alt = idx ^ 1;
	struct bio_slot *sl = bpf_map_lookup_elem(&inflight, &idx), *sl2;

	if (!sl)
		return;
	/* The same pointer still in a slot is a bio object freed and reused whose
	 * completion was not seen (e.g. beyond MAX_CHAIN): it starts afresh. */
	if (sl->bio && sl->bio != bio) {
		sl2 = bpf_map_lookup_elem(&inflight, &alt);
		if (!sl2)
			return;
		if (!sl2->bio || sl2->bio == bio) {
			sl = sl2;
		} else {
			/* both taken: the older bio will not be timed, unless it is
			 * long gone (a bio that never completed in view: not a loss) */
			if (sl2->q_ns < sl->q_ns)
				sl = sl2;
			if (q_ns - sl->q_ns > INFLIGHT_STALE_NS)
				stat_inc(IOS_STAT_STALE);
			else
				stat_inc(IOS_LOST_START_FULL);
		}
	}
	sl->bio = bio;
	sl->q_ns = q_ns;
	sl->d_ns = d_ns;
	sl->tgid = tgid;
	sl->dev = dev;
}


/* The slot holding bio, or NULL. */
static __always_inline struct bio_slot *slot_get(__u64 bio)
{
	__u32 idx = slot_of(bio), alt = idx ^ 1;
	struct bio_slot *sl = bpf_map_lookup_elem(&inflight, &idx);

	if (sl && sl->bio == bio)
		return sl;
	sl = bpf_map_lookup_elem(&inflight, &alt);
	if (sl && sl->bio == bio)
		return sl;
	return NULL;
}


/* The last bio each CPU queued (the queue programs keep it up to date). */
struct last_q {
	__u64 bio;
	__u64 q_ns;
	__u32 tgid;
	__u32 dev;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct last_q);
} last_queued SEC(".maps");

/*
 * block_split names the new bio, split off the front of one already queued:
 * it inherits the parent's queue time and process (bio_chain() made the
 * parent its bi_private before the tracepoint), or else those of the last
 * bio this CPU queued for the same process.
 */
static __always_inline int slot_split(struct bio *bio, bool issue_prog, const bool btf)
{
	struct bio_slot *parent;
	struct last_q *last;
	__u32 zero = 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 key = ptr_value(bio, btf);
	__u64 priv = ptr_value(IOS_READ(btf, bio, bi_private), btf);
	__u64 d_ns = slot_queued_d_ns(bio, issue_prog, btf);

	parent = priv ? slot_get(priv) : NULL;
	if (parent) {
		__u64 q = parent->q_ns;
		__u32 ptgid = parent->tgid, pdev = parent->dev;

		slot_put(key, q, d_ns, ptgid, pdev);
		stat_inc(IOS_STAT_SPLIT);
		return 0;
	}
	last = bpf_map_lookup_elem(&last_queued, &zero);
	if (!last || !last->bio || last->tgid != tgid || last->dev != disk_dev(bio_disk(bio, btf), btf))
		return 0;
	slot_put(key, last->q_ns, d_ns, tgid, last->dev);
	stat_inc(IOS_STAT_SPLIT);
	return 0;
}

#endif /* INFLIGHT_BPF_H */
