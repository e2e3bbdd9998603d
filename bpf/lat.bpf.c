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
 * Each handler exists twice, as tp_btf and raw_tp; user space autoloads one
 * set, chosen from what the kernel's BTF offers.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "hist.bpf.h"
#include "common.bpf.h"
#include "comms.bpf.h"
#include "inflight.bpf.h"

#define MAX_CHAIN 32

const volatile bool targ_per_disk = false;
const volatile bool targ_per_op = false;
const volatile bool targ_per_pid = false;
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
 * issue times (the completion time is now).
 */
__noinline int record(__u32 dev, __u32 tgid, __u32 op_have, __u64 q_ns, __u64 d_ns)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 op = op_have & 0xff, have = (op_have >> 8) & targ_phases;
	struct lat_key key = {};
	struct lat_val *v;
	long err;

	if (!have)
		return 0;
	key.dev = targ_per_disk ? dev : 0;
	key.pid = targ_per_pid ? tgid : 0;
	key.op = targ_per_op ? op : IOS_OP_ALL;
	v = bpf_map_lookup_elem(&hists, &key);
	if (!v) {
		err = bpf_map_update_elem(&hists, &key, &zero_val, BPF_NOEXIST);
		if (err && err != -17 /* EEXIST: another CPU won the race */) {
			stat_inc(IOS_LOST_HIST_FULL);
			return 0;
		}
		v = bpf_map_lookup_elem(&hists, &key);
		if (!v) {
			stat_inc(IOS_LOST_HIST_FULL);
			return 0;
		}
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

/*
 * Each body takes btf, a constant: tp_btf programs read kernel memory with
 * direct (BTF-checked) loads, raw_tp programs with bpf_probe_read_kernel();
 * the compiler keeps only the variant's own kind of access.
 */
static __always_inline int on_bio_queue(struct bio *bio, const bool btf)
{
	struct gendisk *disk = btf ? bio_disk_direct(bio) : bio_disk(bio);
	struct last_q *last;
	struct bio_slot *sl;
	__u32 zero = 0, dev;
	__u64 key, now;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!disk || !(btf ? disk_is_mq_direct(disk) : disk_is_mq(disk)))
		return 0;
	if (targ_tgid && tgid != targ_tgid)
		return 0;
	dev = btf ? disk_dev_direct(disk) : disk_dev(disk);
	if (!dev_wanted(dev))
		return 0;
	key = btf ? ptr_value(bio) : (__u64)bio;
	now = bpf_ktime_get_ns();
	last = bpf_map_lookup_elem(&last_queued, &zero);
	sl = slot_get(key);
	if (sl) {
		/*
		 * The remainder of a bio split right after it was queued comes back
		 * here at once: it keeps its first queue time. Any other slot still
		 * holding this address is left over from an earlier bio whose
		 * completion never reached us: a lost measurement if it was issued.
		 */
		if (last && last->bio == key && !sl->d_ns) {
			stat_inc(IOS_STAT_REQUEUED);
		} else {
			stat_inc(sl->d_ns ? IOS_LOST_C_UNSEEN : IOS_STAT_NEVER_ISSUED);
			sl->q_ns = now;
			sl->d_ns = 0;
			sl->tgid = tgid;
			sl->dev = dev;
		}
	} else {
		slot_put(key, now, tgid, dev);
	}
	if (last) {
		if (targ_per_pid && last->tgid != tgid)
			comms_note(tgid);
		last->bio = key;
		last->q_ns = now;
		last->tgid = tgid;
		last->dev = dev;
	}
	return 0;
}

static __always_inline int on_rq_issue(struct request *rq, const bool btf)
{
	__u64 now = bpf_ktime_get_ns();
	struct bio *bio = btf ? rq->bio : BPF_CORE_READ(rq, bio);
	__u32 dev = btf ? disk_dev_direct(rq_disk_direct(rq)) : disk_dev(rq_disk(rq));
	struct bio_slot *sl;
	__u64 key;
	int i;

	if (!dev_wanted(dev))
		return 0;
	if (!bio) {
		struct bio_start rs = {};

		if (targ_tgid)
			return 0; /* no submitter to match the filter against */
		key = btf ? ptr_value(rq) : (__u64)rq;
		rs.d_ns = now;
		rs.dev = dev;
		if (bpf_map_update_elem(&rq_starts, &key, &rs, BPF_ANY))
			stat_inc(IOS_LOST_RQ_FULL);
		return 0;
	}
	key = btf ? ptr_value(bio) : (__u64)bio;
	if (!slot_get(key)) {
		if (targ_tgid)
			return 0; /* queued by another process, or before tracing */
		/* queued before tracing started: d2c only */
		slot_put(key, 0, 0, dev);
		sl = slot_get(key);
		if (sl)
			sl->d_ns = now;
		stat_inc(IOS_INFLIGHT_AT_START);
		return 0;
	}
	for (i = 0; i < MAX_CHAIN && bio; i++) {
		key = btf ? ptr_value(bio) : (__u64)bio;
		sl = slot_get(key);
		/* a requeued request is issued again: q2d runs to its first issue */
		if (sl && !sl->d_ns)
			sl->d_ns = now;
		bio = btf ? bio->bi_next : BPF_CORE_READ(bio, bi_next);
	}
	if (bio)
		stat_inc(IOS_LOST_CHAIN_LONG);
	return 0;
}

static __always_inline int on_rq_complete(struct request *rq, unsigned int nr_bytes, const bool btf)
{
	struct bio *bio = btf ? rq->bio : BPF_CORE_READ(rq, bio);
	__u32 dev = btf ? disk_dev_direct(rq_disk_direct(rq)) : disk_dev(rq_disk(rq));
	__u32 opf = btf ? rq->cmd_flags : BPF_CORE_READ(rq, cmd_flags);
	__u32 rq_bytes = btf ? rq->__data_len : BPF_CORE_READ(rq, __data_len);
	__u32 rq_flags = btf ? rq->rq_flags : BPF_CORE_READ(rq, rq_flags);
	__u8 op = opf_to_op(opf, rq_bytes);
	struct bio_slot *sl;
	struct bio_start *rs;
	__u64 key, done = 0;
	bool whole = nr_bytes >= rq_bytes;
	int i;

	if (!dev_wanted(dev))
		return 0;
	if (!bio) {
		key = btf ? ptr_value(rq) : (__u64)rq;
		rs = bpf_map_lookup_elem(&rq_starts, &key);
		if (rs) {
			record(dev, 0, op | (1 << IOS_PHASE_D2C) << 8, 0, rs->d_ns);
			bpf_map_delete_elem(&rq_starts, &key);
		}
		return 0;
	}
	/* The data step of a PREFLUSH/FUA write on a write-back disk: its bios are not ended yet.
	 * The I/O is complete, and timed (q2c, q2d, d2c to the end), when the flush sequence ends the
	 * request, as the kernel counts it; the flush requests themselves (no bios) are timed above. */
	if (rq_flush_seq(rq_flags))
		return 0;
	for (i = 0; i < MAX_CHAIN && bio; i++) {
		__u32 size = btf ? bio->bi_iter.bi_size : BPF_CORE_READ(bio, bi_iter.bi_size);

		/* a partial completion ends only the bios it fully covers */
		if (!whole && done + size > nr_bytes)
			break;
		done += size;
		key = btf ? ptr_value(bio) : (__u64)bio;
		sl = slot_get(key);
		if (sl) {
			__u32 have = 0;

			/* d2c once per request, from the first bio's issue time */
			if (i == 0 && whole && sl->d_ns)
				have |= 1 << IOS_PHASE_D2C;
			if (sl->q_ns)
				have |= 1 << IOS_PHASE_Q2C;
			if (sl->q_ns && sl->d_ns)
				have |= 1 << IOS_PHASE_Q2D;
			record(dev, sl->tgid, op | have << 8, sl->q_ns, sl->d_ns);
			sl->bio = 0; /* free the slot */
		} else {
			stat_inc(IOS_STAT_C_NOENTRY);
		}
		bio = btf ? bio->bi_next : BPF_CORE_READ(bio, bi_next);
	}
	return 0;
}

SEC("tp_btf/block_bio_queue")
int BPF_PROG(btf_bio_queue, struct bio *bio)
{
	return on_bio_queue(bio, true);
}

SEC("tp_btf/block_split")
int BPF_PROG(btf_split, struct bio *bio)
{
	return slot_split(bio, true);
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(btf_rq_issue, struct request *rq)
{
	return on_rq_issue(rq, true);
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(btf_rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, nr_bytes, true);
}

SEC("raw_tp/block_bio_queue")
int BPF_PROG(raw_bio_queue, struct bio *bio)
{
	return on_bio_queue(bio, false);
}

SEC("raw_tp/block_split")
int BPF_PROG(raw_split, struct bio *bio)
{
	return slot_split(bio, false);
}

SEC("raw_tp/block_rq_issue")
int BPF_PROG(raw_rq_issue, struct request *rq)
{
	return on_rq_issue(rq, false);
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(raw_rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, nr_bytes, false);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

COMMS_RENAME_PROGRAMS
