// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope lat: in-kernel log-linear histograms of block I/O latency in three
 * phases: q2c (bio queued -> request completed), q2d (queued -> issued to the
 * driver) and d2c (issued -> completed). Nothing is sent to user space per
 * event; user space reads the histogram map once per interval.
 *
 * Per-bio state is keyed by the bio pointer (unique while the bio is in
 * flight, and never ambiguous across disks the way a sector is). At issue and
 * completion the request's bio chain is walked, so every bio merged into a
 * request gets its own q2d and q2c (btt counts the same way), while d2c is
 * counted once per request (what /proc/diskstats counts).
 *
 * Kernel-stamp timing (targ_stamps, stamps.bpf.h): the completion program
 * alone times each request of a disk the kernel stamps, per request: q2c from
 * its start, q2d from its start to its issue, d2c from its issue. One program
 * per I/O, no per-I/O map but the histogram. The disks whose requests carry
 * no stamps are followed by the queue and issue programs as above.
 *
 * Each handler exists twice, as tp_btf and raw_tp (twins.bpf.h); user space
 * autoloads one set, chosen from what the kernel's BTF offers.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "twins.bpf.h"
#include "core_fixes.bpf.h"
#include "block.bpf.h"
#include "hist.bpf.h"
#include "common.bpf.h"
#include "comms.bpf.h"
#include "inflight.bpf.h"
#include "rqpath.bpf.h"
#include "stamps.bpf.h"
#include "cgroup.bpf.h"
#include "throttle.bpf.h"

#define LAT_MAX_CHAIN 32 /* bios of a request walked */

const volatile bool targ_per_disk = false;
const volatile bool targ_per_op = false;
const volatile bool targ_per_pid = false;
const volatile bool targ_per_cgroup = false; /* --per-cgroup: a histogram per cgroup (cgroup.bpf.h) */
const volatile bool targ_shared_hists = false; /* hists is a shared (not per-CPU) hash: -P */
const volatile __u32 targ_tgid = 0;
const volatile __u8 targ_phases = 0x7; /* bit per enum ios_lat_phase */
/* Requests without bios (the flush machinery's flush_rq): issue time. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* struct request * */
	__type(value, struct bio_start);
} rq_starts SEC(".maps");

/* User space switches this to a shared BPF_MAP_TYPE_HASH for -P. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct lat_key);
	__type(value, struct lat_val);
} hists SEC(".maps");


static struct lat_val zero_val;

/*
 * Everything measured for one bio, added with one map lookup. A global (not
 * inlined) function: the verifier checks it once, on its own, instead of once
 * per call site inside the bio-chain loops (the object loads in tens of ms).
 * op_have: the op in the low byte, and above it which of q2c, q2d, d2c were
 * measured (bits of enum ios_lat_phase); q_ns/d_ns: the bio's queue and
 * issue times (the completion time is now). dev_tgid: the disk << 32 | the
 * queueing process (five arguments at most); cgroup: the cgroup's id.
 */
__noinline int record(__u64 dev_tgid, __u64 cgroup, __u32 op_have, __u64 q_ns, __u64 d_ns)
{
	__u32 dev = dev_tgid >> 32, tgid = (__u32)dev_tgid;
	__u64 now = bpf_ktime_get_ns();
	__u32 op = op_have & 0xff, have = (op_have >> 8) & targ_phases;
	struct lat_key key = {};
	struct lat_val *v;

	if (!have)
		return 0;
	key.cgroup = cgroup;
	key.dev = targ_per_disk ? dev : 0;
	key.pid = targ_per_pid ? tgid : 0;
	key.op = targ_per_op ? op : IOS_OP_ALL;
	v = lookup_or_init(&hists, &key, &zero_val);
	if (!v) {
		stat_inc(IOS_LOST_HIST_FULL);
		return 0;
	}
	/* only record() writes hists, from the completion program: per-CPU values
	 * have one writer per CPU; a shared map needs atomic adds */
	if (targ_shared_hists) {
		if (have & (1 << IOS_PHASE_Q2C))
			hist_add(&v->ph[IOS_PHASE_Q2C], now - q_ns);
		if (have & (1 << IOS_PHASE_Q2D))
			hist_add(&v->ph[IOS_PHASE_Q2D], d_ns - q_ns);
		if (have & (1 << IOS_PHASE_D2C))
			hist_add(&v->ph[IOS_PHASE_D2C], now - d_ns);
	} else {
		if (have & (1 << IOS_PHASE_Q2C))
			hist_add_local(&v->ph[IOS_PHASE_Q2C], now - q_ns);
		if (have & (1 << IOS_PHASE_Q2D))
			hist_add_local(&v->ph[IOS_PHASE_Q2D], d_ns - q_ns);
		if (have & (1 << IOS_PHASE_D2C))
			hist_add_local(&v->ph[IOS_PHASE_D2C], now - d_ns);
	}
	return 0;
}

/* The hooks of the shared path (rqpath.bpf.h). */

static __always_inline __u32 tgid_filter(void)
{
	return targ_tgid;
}

static __always_inline bool dev_probed(__u32 dev)
{
	return stamps_probed(dev);
}

static __always_inline void note_comm(struct last_q *last, __u32 tgid)
{
	if (targ_per_pid && last->tgid != tgid)
		comms_note(tgid);
}

/* Requests without bios (the flush machinery's flush requests): timed from issue, d2c only. */
static __always_inline void flush_rq_issued(struct request *rq, __u32 dev, __u64 now, const bool btf)
{
	struct bio_start rs = {};
	__u64 key;

	if (targ_tgid || targ_cgroup)
		return; /* no submitter to match the filter against */
	key = ptr_value(rq, btf);
	rs.d_ns = now;
	rs.dev = dev;
	if (map_update(&rq_starts, &key, &rs, BPF_ANY))
		stat_inc(IOS_LOST_RQ_FULL);
}

static __always_inline void flush_rq_done(struct request *rq, __u32 dev, __u8 op, __u64 now, const bool btf)
{
	__u64 key = ptr_value(rq, btf);
	struct bio_start *rs = bpf_map_lookup_elem(&rq_starts, &key);

	if (rs) {
		record((__u64)dev << 32, 0, op | (1 << IOS_PHASE_D2C) << 8, 0, rs->d_ns);
		map_delete(&rq_starts, &key, false);
	}
}

/* One bio's q2c and q2d (and the request's d2c with its first bio): one record(). */
static __always_inline void bio_record(struct bio_slot *sl, struct bio *bio, __u32 dev, __u8 op, __u64 d_ns,
				       bool d2c)
{
	__u32 have = 0;
	__u64 cgroup;

	if (!bio_cgroup_pass(bio, targ_per_cgroup, &cgroup))
		return; /* -c: charged to another cgroup */
	if (d2c && d_ns)
		have |= 1 << IOS_PHASE_D2C;
	if (sl->q_ns)
		have |= 1 << IOS_PHASE_Q2C;
	if (sl->q_ns && d_ns)
		have |= 1 << IOS_PHASE_Q2D;
	record((__u64)dev << 32 | sl->tgid, cgroup, op | have << 8, sl->q_ns, d_ns);
}

static __always_inline void bio_done(struct request *rq, struct bio_slot *sl, __u32 dev, __u8 op, __u32 size,
				     int i, bool whole, __u64 now, const bool btf)
{
	__u64 d_ns;

	if (!sl) {
		stat_inc(IOS_STAT_C_NOENTRY);
		return;
	}
	d_ns = sl->d_ns;
	/*
	 * A request ended without being issued itself: the empty PREFLUSH write,
	 * whose device work is its flush request (timed as op flush). Its D is
	 * when it became a request (rq->start_time_ns, where the kernel starts
	 * its wait; not before its Q: the kernel's clock can be a plug's cached
	 * time), so d2c is its wait for the flush, and every request the kernel
	 * counts has one d2c. Read only on this rare path.
	 */
	if (i == 0 && whole && !d_ns && sl->q_ns) {
		__u64 start = rq_start_ns(rq, btf);

		d_ns = start > sl->q_ns ? start : sl->q_ns;
	}
	/* d2c once per request, from the first bio's issue time */
	bio_record(sl, IOS_READ(btf, rq, bio), dev, op, d_ns, i == 0 && whole);
}

static __always_inline void bio_done_rest(struct bio_slot *sl, __u64 bio, __u32 dev, __u8 op, __u32 opf, __u32 size,
					  __u64 now)
{
	if (!sl) {
		stat_inc(IOS_STAT_C_NOENTRY);
		return;
	}
	bio_record(sl, (struct bio *)bio, dev, op, sl->d_ns, false);
}

static __always_inline void rq_done(struct request *rq, __u32 dev, __u8 op, __u64 first_q, __u64 now,
				    const bool btf)
{
}

/* A request ended on a disk the kernel stamps: one histogram update (stamps.bpf.h). */
static __always_inline int stamps_complete(struct request *rq, unsigned int nr_bytes, __u32 dev, const bool btf)
{
	struct stamps st;
	__u64 cgroup;

	switch (stamps_read(rq, nr_bytes, btf, &st)) {
	case STAMPS_REQUEST:
		/* the request's bios are charged to one cgroup: blk-mq merges no bios across cgroups */
		if (!bio_cgroup_pass(IOS_READ(btf, rq, bio), targ_per_cgroup, &cgroup))
			break;
		record((__u64)dev << 32, cgroup, st.op | ((1 << IOS_PHASE_Q2C) | (1 << IOS_PHASE_Q2D) | (1 << IOS_PHASE_D2C)) << 8,
		       st.start, st.io);
		break;
	case STAMPS_FLUSH_RQ:
		if (targ_cgroup)
			break; /* a flush request of the block layer's own: no cgroup to match -c against */
		record((__u64)dev << 32, 0, st.op | (1 << IOS_PHASE_D2C) << 8, 0, st.io);
		break;
	case STAMPS_NONE:
		not_stamped(dev);
		break;
	}
	return 0;
}

static __always_inline int lat_rq_complete(struct request *rq, unsigned int nr_bytes, const bool btf)
{
	if (targ_stamps) {
		__u32 dev = rq_dev(rq, btf);

		if (!dev_wanted(dev))
			return 0;
		if (!stamps_probed(dev))
			return stamps_complete(rq, nr_bytes, dev, btf);
	}
	return rqpath_rq_complete(rq, nr_bytes, LAT_MAX_CHAIN, 0 /* record() reads the clock */, btf);
}

/* The programs: the shared path (rqpath.bpf.h), with an issue program (issue_prog true). */
IOS_BLOCK_TP(rq_issue, block_rq_issue, rqpath_rq_issue(rq, LAT_MAX_CHAIN, btf), struct request *rq)
IOS_BLOCK_TP(bio_queue, block_bio_queue, rqpath_bio_queue(bio, true, btf), struct bio *bio)
IOS_BLOCK_TP(split, block_split, slot_split(bio, true, btf), struct bio *bio)
IOS_TP(rq_complete, block_rq_complete, lat_rq_complete(rq, nr_bytes, btf), struct request *rq, int error,
       unsigned int nr_bytes)

/* bios blk-throttle held (throttle.bpf.h): attached once a limit is in force on a traced disk */
THROTTLE_HELD_PROGRAMS
THROTTLE_SUBMIT_PROGRAMS
THROTTLE_NOTE_PROGRAM

char LICENSE[] SEC("license") = "Dual BSD/GPL";

COMMS_RENAME_PROGRAMS
