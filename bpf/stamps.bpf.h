/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Timing a request from the kernel's own stamps, with the completion program
 * alone (lat, agg). On a blk-mq queue the kernel stamps each request with its
 * start (rq->start_time_ns, where the await of /proc/diskstats starts; valid
 * under RQF_IO_STAT) and its issue to the driver (rq->io_start_time_ns; valid
 * under RQF_STATS, which blk-stat users such as wbt turn on). The fields are
 * not cleared when unused: only the flags say whether they hold this
 * request's times (core_fixes.bpf.h).
 *
 * targ_stamps on: the completion program times every request of a disk not
 * listed in probe_devs from its stamps, per request (as /proc/diskstats
 * counts); the listed disks (their requests carry no stamps) are followed by
 * the queue and issue programs of rqpath.bpf.h (RQPATH_PROBED). A request
 * without stamps on an unlisted disk is counted (IOS_LOST_UNSTAMPED, and per
 * disk in unstamped_devs, from which user space moves the disk to the
 * probes: lib/ioscope/kernel/stamps.py), never timed from stale fields.
 * Include after common.bpf.h.
 */
#ifndef STAMPS_BPF_H
#define STAMPS_BPF_H

const volatile bool targ_stamps = false;

/* Disks timed by the probes under targ_stamps; looked up only when probe_some[0] is set. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IOS_MAX_FILTER_DISKS);
	__type(key, __u32);
	__type(value, __u8);
} probe_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} probe_some SEC(".maps");

/* Disks with a request that ended without stamps (a rare path). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IOS_MAX_FILTER_DISKS);
	__type(key, __u32);
	__type(value, __u64);
} unstamped_devs SEC(".maps");

/* Is this disk followed by the queue and issue programs (the bio slots)? */
static __always_inline bool stamps_probed(__u32 dev)
{
	__u32 zero = 0, *some;

	if (!targ_stamps)
		return true;
	some = bpf_map_lookup_elem(&probe_some, &zero);
	if (!some || !*some)
		return false;
	return bpf_map_lookup_elem(&probe_devs, &dev) != NULL;
}

static __always_inline void not_stamped(__u32 dev)
{
	__u64 one = 1, *n = bpf_map_lookup_elem(&unstamped_devs, &dev);

	stat_inc(IOS_LOST_UNSTAMPED);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		map_update(&unstamped_devs, &dev, &one, BPF_NOEXIST);
}

enum stamps_kind {
	STAMPS_SKIP = 0,     /* ends nothing: a partial completion, the data step of a flush sequence */
	STAMPS_REQUEST = 1,  /* a request: start and io valid (q2c, q2d, d2c) */
	STAMPS_FLUSH_RQ = 2, /* a flush request of the flush machinery (no bio): io valid (d2c) */
	STAMPS_NONE = 3,     /* ended without the stamps it needs: not_stamped() */
};

struct stamps {
	__u64 start;  /* the request's start (STAMPS_REQUEST) */
	__u64 io;     /* its issue; an empty PREFLUSH write, never issued itself: its start */
	__u32 bytes;  /* its size (a flush sequence's end: the data it carried) */
	__u32 opf;    /* cmd_flags */
	__u8 op;      /* enum ios_io_op */
};

/*
 * Classify a completion and read its stamps. The same rules as the probes'
 * path (rqpath.bpf.h): a partial completion ends nothing (the rest is counted
 * when the request ends), nor does the data step of a flush sequence; a flush
 * request is timed from its issue; an empty PREFLUSH write from its start
 * (its d2c is its wait for the flush).
 */
static __always_inline int stamps_read(struct request *rq, unsigned int nr_bytes, const bool btf, struct stamps *s)
{
	struct bio *bio = btf ? rq->bio : BPF_CORE_READ(rq, bio);
	__u32 rq_bytes = btf ? rq->__data_len : BPF_CORE_READ(rq, __data_len);
	__u32 rq_flags = btf ? rq->rq_flags : BPF_CORE_READ(rq, rq_flags);

	s->opf = btf ? rq->cmd_flags : BPF_CORE_READ(rq, cmd_flags);
	s->op = opf_to_op(s->opf, rq_bytes);
	s->bytes = rq_bytes;
	s->start = 0;
	s->io = 0;
	if (nr_bytes < rq_bytes)
		return STAMPS_SKIP;
	if (rq_start_stamped(rq_flags))
		s->start = btf ? rq_start_ns_direct(rq) : rq_start_ns(rq);
	if (rq_issue_stamped(rq_flags))
		s->io = btf ? rq_io_start_ns_direct(rq) : rq_io_start_ns(rq);
	if (!bio)
		return s->io ? STAMPS_FLUSH_RQ : STAMPS_NONE;
	if (rq_flush_seq(rq_flags))
		return STAMPS_SKIP;
	/* the end of a flush sequence: its size was consumed at the data step (rqpath.bpf.h) */
	if (!rq_bytes && s->io && bpf_core_field_exists(rq->stats_sectors))
		s->bytes = (__u32)(btf ? rq->stats_sectors : BPF_CORE_READ(rq, stats_sectors)) << 9;
	if (!s->io && !rq_bytes)
		s->io = s->start; /* never issued: an empty PREFLUSH write */
	if (!s->start || !s->io)
		return STAMPS_NONE;
	if (s->io < s->start)
		s->io = s->start; /* not seen; the two stamps come from one clock, but guard the subtraction */
	/* The kernel reads its clock once per plug (blk_time_get_ns()): a request started and issued in
	 * one plug has both stamps from one reading. Counted, so that its q2d of 0 is explained. */
	if (s->io == s->start && rq_bytes)
		stat_inc(IOS_STAT_ONE_CLOCK);
	return STAMPS_REQUEST;
}

#endif /* STAMPS_BPF_H */
