// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope record / snoop: every block-layer event as one struct trace_event
 * (trace_event.h) in a ring buffer, the events blktrace records:
 *
 *   Q block_bio_queue      G block_getrq          I block_rq_insert
 *   M block_bio_backmerge  F block_bio_frontmerge M block_rq_merge (request merge)
 *   D block_rq_issue       C block_rq_complete    C block_bio_complete (bio-based)
 *   R block_rq_requeue     P block_plug           U/UT block_unplug (IO / timer)
 *   X block_split          A block_bio_remap      A block_rq_remap
 *
 * Fields follow the kernel's blk tracer (kernel/trace/blktrace.c): bio events
 * carry the bio's sector and size, request events the request's (0 sector for
 * passthrough), completions the completed byte count and -errno; category
 * bits are computed from the op flags as blktrace does.
 *
 * Every pid that appears gets a process note (its comm) the first time it is
 * seen and whenever its comm changes: a per-CPU cache of recent (pid, comm)
 * pairs answers the common case without touching a shared map, an LRU hash
 * answers the rest.
 *
 * Records go to per-CPU rings of fixed-size slots in a memory-mappable array
 * (rec_ring), not to a BPF ring buffer: at several hundred thousand events
 * per second per CPU a ring buffer reservation (an irq-saving spin lock, a
 * shared producer position) costs more than the rest of a program. Each CPU
 * has one ring per context level (task, softirq, hardirq), so a program never
 * shares a ring with a program it interrupted or that interrupts it: the
 * level is taken from a per-CPU nesting counter raised on entry and put back
 * on exit. Plain loads and stores do for it: the programs run with
 * preemption off, so only interrupts nest them, and an interrupting program
 * puts the counter back before the one it interrupted resumes (a locked
 * add would cost two atomic operations per event for nothing).
 * A ring's producer is therefore alone; it writes the slot at its head, then
 * publishes it by advancing the head: on x86, whose stores become visible in
 * program order (TSO), a plain store after a compiler barrier; elsewhere an
 * atomic add (a full barrier).
 * User space (lib/ioscope/kernel/_libbpf.c: SlotRings) maps both arrays, copies the
 * slots between each ring's tail and head on a timer, and advances the tail.
 * A full ring drops the record and counts it per CPU in rec_stats. No
 * wake-ups are sent: the consumer polls.
 *
 * Each handler exists as tp_btf (direct BTF pointer reads) and raw_tp
 * (BPF_CORE_READ) programs sharing one __always_inline body (twins.bpf.h);
 * user space autoloads one set.
 */
/* vmlinux.h has the kernel's own struct trace_event (ftrace output); ours,
 * from trace_event.h, keeps the name, so the kernel's is renamed here. */
#define trace_event trace_event___kernel
#include "vmlinux.h"
#undef trace_event
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "twins.bpf.h"
#include "core_fixes.bpf.h"
#include "block.bpf.h"
#include "blktrace.bpf.h"
#include "trace_event.h"
#include "cgroup.bpf.h"
#include "record.h"
#include "maperr.bpf.h"
#define COMMS_MAP 0
#include "comms.bpf.h"
#include "devfilter.bpf.h"

#define MAX_CHAIN 8 /* bios of a request checked against the -p filter */

const volatile __u32 targ_tgid = 0;
/* bench/record_overhead.py only, to take the cost apart (0 in every real use; the verifier
 * removes the checks of a constant): 1 return at once, 2 return after reading the clock,
 * 3 return with the event's fields read, before the ring. */
const volatile __u32 targ_stop_at = 0;
const volatile __u32 targ_ring_slots = 1;
const volatile __u32 targ_ring_cpus = 1;      /* CPUs with rings: those present at start (user space sets it) */     /* slots per ring, a power of two (user space sets it) */

/* The rings: ring r = cpu * IOS_REC_LEVELS + level owns slots
 * [r * targ_ring_slots, (r + 1) * targ_ring_slots). max_entries set by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct trace_event);
} rec_ring SEC(".maps");

/* Head (records published, by the program) and tail (records taken, by user space) of each ring. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rec_ring_pos);
} rec_pos SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOS_REC_NR_STATS);
	__type(key, __u32);
	__type(value, __u64);
} rec_stats SEC(".maps");

/* Per-CPU, per-level state of the process-note logic: the pid of the last
 * event at this level (and when its comm was last compared), and a small
 * cache of recently seen (pid, comm) pairs. */
struct level_state {
	__u64 c0[IOS_REC_COMM_SLOTS];
	__u64 c1[IOS_REC_COMM_SLOTS];
	__u32 pid[IOS_REC_COMM_SLOTS];
	__u8 valid[IOS_REC_COMM_SLOTS];
	__u64 last_check_ns;
	__u64 last_gen;
	__u32 last_pid;
	__u32 last_valid;
};

struct cpu_state {
	__u64 nest; /* programs of this object running on this CPU (interrupts nest them) */
	struct level_state lv[IOS_REC_LEVELS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_state SEC(".maps");

struct comm16 {
	__u64 c0;
	__u64 c1;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* pid (thread id) */
	__type(value, struct comm16);
} comms_seen SEC(".maps");

/* -p: bios queued by the traced process, so that request events done in
 * other contexts (kworkers, interrupts) can be matched to it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* struct bio * */
	__type(value, __u8);
} tracked SEC(".maps");

/* Puts struct trace_event into the object's BTF, where the ABI test reads its layout. */
struct trace_event trace_event_btf_anchor = {};

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&rec_stats, &idx);

	if (v)
		*v += 1; /* per-CPU slot: no atomic needed */
}

/* A free slot of this CPU's ring at this level (its head in *head), or NULL: ring full. */
static __always_inline struct trace_event *slot_get(__u32 ring, struct rec_ring_pos **posp, __u64 *head)
{
	struct rec_ring_pos *pos = bpf_map_lookup_elem(&rec_pos, &ring);
	__u32 idx;

	if (!pos)
		return NULL;
	*head = pos->head;
	if (*head - *(volatile __u64 *)&pos->tail >= targ_ring_slots)
		return NULL;
	*posp = pos;
	idx = ring * targ_ring_slots + ((__u32)*head & (targ_ring_slots - 1));
	return bpf_map_lookup_elem(&rec_ring, &idx);
}

/* Publish the slot: every store to it before the new head. On x86 a plain store
 * does (above); elsewhere the atomic add, whose old value is the head the slot
 * was taken at unless two programs shared the ring (the level logic rules that
 * out; counted, never seen). */
static __always_inline void slot_put(struct rec_ring_pos *pos, __u64 head)
{
#if defined(__TARGET_ARCH_x86)
	/* TSO: the slot's stores are seen before the head's; only the compiler must keep the order */
	asm volatile("" ::: "memory");
	*(volatile __u64 *)&pos->head = head + 1;
#else
	if (__sync_fetch_and_add(&pos->head, 1) != head)
		stat_inc(IOS_REC_RING_RACE);
#endif
}

/*
 * Send a process note when this pid is new or its comm changed. Fast path:
 * the same pid as the previous event at this level, compared less than
 * COMM_RECHECK_NS ago: nothing to do (no helper call). A comm change (exec,
 * prctl) is therefore noticed within COMM_RECHECK_NS of a pid's events.
 */
#define COMM_RECHECK_NS 20000000ULL

/* Bumped by task_rename (exec, prctl, /proc/PID/comm): every level's fast path then compares
 * the comm again at its next event, so I/O after a rename carries the new name at once. */
__u64 rename_gen = 0;

static __always_inline void note_process(__u64 pid_tgid, __u64 ts, struct level_state *cs, __u32 ring, __u16 cpu)
{
	struct comm16 cur = {}, *seen;
	struct trace_event *n;
	struct rec_ring_pos *pos = NULL;
	__u64 head = 0;
	__u32 pid = (__u32)pid_tgid, slot = pid & (IOS_REC_COMM_SLOTS - 1);

	__u64 gen = *(volatile __u64 *)&rename_gen;

	if (cs->last_valid && cs->last_pid == pid && ts - cs->last_check_ns < COMM_RECHECK_NS &&
	    cs->last_gen == gen)
		return;
	cs->last_gen = gen;
	cs->last_pid = pid;
	cs->last_check_ns = ts;
	cs->last_valid = 1;
	bpf_get_current_comm(&cur, sizeof(cur));
	if (cs->valid[slot] && cs->pid[slot] == pid && cs->c0[slot] == cur.c0 && cs->c1[slot] == cur.c1)
		return;
	cs->valid[slot] = 1;
	cs->pid[slot] = pid;
	cs->c0[slot] = cur.c0;
	cs->c1[slot] = cur.c1;
	seen = bpf_map_lookup_elem(&comms_seen, &pid);
	if (seen && seen->c0 == cur.c0 && seen->c1 == cur.c1)
		return;
	n = slot_get(ring, &pos, &head);
	if (!n || !pos) {
		stat_inc(IOS_REC_LOST_NOTE);
		cs->valid[slot] = 0; /* try again next time */
		cs->last_valid = 0;
		return;
	}
	map_update(&comms_seen, &pid, &cur, BPF_ANY);
	n->ts = ts;
	n->sector = cur.c0;
	n->aux = cur.c1;
	n->bytes = 0;
	n->dev = 0;
	n->aux_dev = 0;
	n->pid = pid;
	n->tgid = pid_tgid >> 32;
	n->cpu = cpu;
	n->error = 0;
	n->action = 0;
	n->category = IOS_TC_NOTIFY;
	n->flags = IOS_EV_NOTE_PROCESS;
	slot_put(pos, head);
}

static __always_inline int emit(__u64 ts, __u64 pid_tgid, __u32 dev, __u16 action, __u16 category, __u64 sector,
				__u32 bytes, __u64 aux, __u32 aux_dev, int error, __u32 flags)
{
	struct rec_ring_pos *pos = NULL;
	struct trace_event *e;
	struct cpu_state *cs;
	struct level_state *ls;
	__u64 head = 0;
	__u64 lvl; /* 64-bit like the counter: a truncated copy would lose the bound the verifier checked */
	__u32 zero = 0, cpu, ring;

	if (targ_stop_at == 3)
		return (ts ^ sector ^ aux ^ pid_tgid ^ dev ^ bytes ^ action ^ category ^ aux_dev ^ error) == 0;
	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!cs)
		return 0;
	lvl = *(volatile __u64 *)&cs->nest; /* plain: see the top of this file */
	*(volatile __u64 *)&cs->nest = lvl + 1;
	if (lvl >= IOS_REC_LEVELS) {
		stat_inc(IOS_REC_LOST_NEST);
		goto out;
	}
	/*
	 * The level's state, addressed while lvl's bound is in a register: 6.1's
	 * verifier keeps no bounds for a scalar the compiler spilled to the stack
	 * before its check ("math between map_value pointer and register with
	 * unbounded min value"; 6.12's does), so the pointer, not lvl, is what
	 * must survive the helper call below.
	 */
	ls = &cs->lv[lvl];
	barrier_var(ls);
	cpu = bpf_get_smp_processor_id();
	if (cpu >= targ_ring_cpus) { /* a CPU plugged in since the start: it has no rings */
		stat_inc(IOS_REC_LOST_NO_RING);
		goto out;
	}
	ring = cpu * IOS_REC_LEVELS + lvl;
	note_process(pid_tgid, ts, ls, ring, cpu);
	e = slot_get(ring, &pos, &head);
	if (!e || !pos) {
		stat_inc(IOS_REC_LOST_EVENT);
		goto out;
	}
	e->ts = ts;
	e->sector = sector;
	e->aux = aux;
	e->bytes = bytes;
	e->dev = dev;
	e->aux_dev = aux_dev;
	e->pid = (__u32)pid_tgid;
	e->tgid = pid_tgid >> 32;
	e->cpu = cpu;
	e->error = (__u16)error;
	e->action = action;
	e->category = category;
	e->flags = flags;
	slot_put(pos, head);
out:
	*(volatile __u64 *)&cs->nest = lvl;
	return 0;
}

/* -p: is this bio (queued by the traced process) remembered? */
static __always_inline bool bio_tracked(struct bio *bio)
{
	__u64 key = (__u64)bio;

	return bpf_map_lookup_elem(&tracked, &key) != NULL;
}

static __always_inline void track_bio(struct bio *bio)
{
	__u64 key = (__u64)bio;
	__u8 one = 1;

	if (map_update(&tracked, &key, &one, BPF_ANY))
		stat_inc(IOS_REC_PID_MAP_FULL);
}

/* -p for request events: does the request hold a bio of the traced process? */
static __always_inline bool rq_tracked(struct request *rq, bool untrack)
{
	struct bio *bio = BPF_CORE_READ(rq, bio);
	bool found = false;
	int i;

	for (i = 0; i < MAX_CHAIN && bio; i++) {
		__u64 key = (__u64)bio;

		if (bpf_map_lookup_elem(&tracked, &key)) {
			found = true;
			if (!untrack)
				break;
			map_delete(&tracked, &key, true);
		}
		bio = BPF_CORE_READ(bio, bi_next);
	}
	return found;
}

/* The event's time, read first; true when a stage of bench/record_overhead.py stops the program before (1) or
 * right after (2) reading the clock (targ_stop_at is 0 in real use: the verifier drops this). */
static __always_inline bool bench_stop(__u64 *ts)
{
	if (targ_stop_at == 1)
		return true;
	*ts = bpf_ktime_get_ns();
	return targ_stop_at == 2;
}

/* ---- bio events --------------------------------------------------------- */

static __always_inline int on_bio(struct bio *bio, __u16 action, __u16 actbits, __u64 aux, __u32 aux_dev,
				  const bool btf)
{
	__u64 ts;

	if (bench_stop(&ts))
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct gendisk *disk = bio_disk(bio, btf);
	__u32 dev = disk_dev(disk, btf);
	__u32 opf;

	if (!dev_wanted(dev))
		return 0;
	if (targ_tgid) {
		if ((pid_tgid >> 32) == targ_tgid) {
			if (action == IOS_TA_QUEUE || action == IOS_TA_SPLIT)
				track_bio(bio);
		} else if (!bio_tracked(bio)) {
			return 0;
		}
	}
	opf = IOS_READ(btf, bio, bi_opf);
	if (action == IOS_TA_QUEUE) {
		/* the cgroup the bio is charged to, in the queue event's aux (a queue event has no other use
		 * for it): what names the service whose I/O this is, kworkers' writeback and throttled bios
		 * included (cgroup.bpf.h) */
		aux = bio_cgroup_id(bio);
		return emit(ts, pid_tgid, dev, action, opf_to_tc(opf) | actbits, IOS_READ(btf, bio, bi_iter.bi_sector),
			    IOS_READ(btf, bio, bi_iter.bi_size), aux, aux_dev, 0, aux ? IOS_EV_CGROUP : 0);
	}
	return emit(ts, pid_tgid, dev, action, opf_to_tc(opf) | actbits, IOS_READ(btf, bio, bi_iter.bi_sector),
		    IOS_READ(btf, bio, bi_iter.bi_size), aux, aux_dev, 0, 0);
}

static __always_inline int on_bio_complete(struct bio *bio, const bool btf)
{
	__u64 ts;

	if (bench_stop(&ts))
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct gendisk *disk = bio_disk(bio, btf);
	__u32 dev = disk_dev(disk, btf);
	__u32 opf;

	if (!dev_wanted(dev))
		return 0;
	if (targ_tgid) {
		__u64 key = (__u64)bio;

		if (!bpf_map_lookup_elem(&tracked, &key))
			return 0;
		map_delete(&tracked, &key, true);
	}
	opf = IOS_READ(btf, bio, bi_opf);
	return emit(ts, pid_tgid, dev, IOS_TA_COMPLETE, opf_to_tc(opf) | IOS_TC_COMPLETE,
		    IOS_READ(btf, bio, bi_iter.bi_sector), IOS_READ(btf, bio, bi_iter.bi_size), 0, 0,
		    blk_status_errno(IOS_READ(btf, bio, bi_status)), 0);
}

/* ---- request events ----------------------------------------------------- */

static __always_inline int on_rq(struct request *rq, __u16 action, __u16 actbits, int has_bytes, __u32 nr_bytes,
				 int error, __u64 aux, __u32 aux_dev, const bool btf)
{
	__u64 ts;

	if (bench_stop(&ts))
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct gendisk *disk = rq_disk(rq, btf);
	__u32 dev = disk_dev(disk, btf);
	__u32 opf, bytes;
	__u64 sector;
	__u16 tc;

	if (!dev_wanted(dev))
		return 0;
	if (targ_tgid && !rq_tracked(rq, action == IOS_TA_COMPLETE && nr_bytes >= IOS_READ(btf, rq, __data_len)))
		return 0;
	opf = IOS_READ(btf, rq, cmd_flags);
	tc = opf_to_tc(opf) | actbits;
	if (opf_is_passthrough(opf)) {
		tc |= IOS_TC_PC;
		sector = 0;
	} else {
		tc |= IOS_TC_FS;
		sector = IOS_READ(btf, rq, __sector);
		if (sector == (__u64)-1) /* never set (flush requests): 0, as blk_rq_trace_sector() */
			sector = 0;
	}
	bytes = has_bytes ? nr_bytes : IOS_READ(btf, rq, __data_len);
	return emit(ts, pid_tgid, dev, action, tc, sector, bytes, aux, aux_dev, error, 0);
}

/* ---- plug and unplug ---------------------------------------------------- */

static __always_inline int on_plug(struct request_queue *q, __u16 action, __u64 depth, const bool btf)
{
	__u64 ts;

	if (bench_stop(&ts))
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 dev = disk_dev(queue_disk(q, btf), btf);

	if (!dev_wanted(dev))
		return 0;
	if (targ_tgid && (pid_tgid >> 32) != targ_tgid)
		return 0;
	return emit(ts, pid_tgid, dev, action, IOS_TC_QUEUE, 0, 0, depth, 0, 0, 0);
}

/* ---- the programs ------------------------------------------------------- */

IOS_BLOCK_TP(bio_queue, block_bio_queue, on_bio(bio, IOS_TA_QUEUE, IOS_TC_QUEUE, 0, 0, btf), struct bio *bio)
IOS_BLOCK_TP(getrq, block_getrq, on_bio(bio, IOS_TA_GETRQ, IOS_TC_QUEUE, 0, 0, btf), struct bio *bio)
IOS_BLOCK_TP(rq_insert, block_rq_insert, on_rq(rq, IOS_TA_INSERT, IOS_TC_QUEUE, 0, 0, 0, 0, 0, btf), struct request *rq)
IOS_BLOCK_TP(rq_issue, block_rq_issue, on_rq(rq, IOS_TA_ISSUE, IOS_TC_ISSUE, 0, 0, 0, 0, 0, btf), struct request *rq)
IOS_BLOCK_TP(rq_requeue, block_rq_requeue, on_rq(rq, IOS_TA_REQUEUE, IOS_TC_REQUEUE, 0, 0, 0, 0, 0, btf),
	     struct request *rq)
IOS_BLOCK_TP(rq_merge, block_rq_merge, on_rq(rq, IOS_TA_BACKMERGE, IOS_TC_QUEUE, 0, 0, 0, 0, 0, btf), struct request *rq)

/* 5.10's bio merge events pass the request too, (q, rq, bio): their __q programs are their own. */
IOS_TP(bio_backmerge, block_bio_backmerge, on_bio(bio, IOS_TA_BACKMERGE, IOS_TC_QUEUE, 0, 0, btf), struct bio *bio)
IOS_TP(bio_backmerge__q, block_bio_backmerge, on_bio(bio, IOS_TA_BACKMERGE, IOS_TC_QUEUE, 0, 0, btf),
       struct request_queue *q, struct request *rq, struct bio *bio)
IOS_TP(bio_frontmerge, block_bio_frontmerge, on_bio(bio, IOS_TA_FRONTMERGE, IOS_TC_QUEUE, 0, 0, btf),
       struct bio *bio)
IOS_TP(bio_frontmerge__q, block_bio_frontmerge, on_bio(bio, IOS_TA_FRONTMERGE, IOS_TC_QUEUE, 0, 0, btf),
       struct request_queue *q, struct request *rq, struct bio *bio)

/*
 * block_rq_complete's error: a blk_status_t in 6.1 and later, the errno (an
 * int) in 5.10. User space reads which from the tracepoint's BTF
 * (targ_complete_errno). The argument is read whole and narrowed here: a
 * narrow argument's upper register bits are not defined by the ABI.
 */
const volatile bool targ_complete_errno = false;

static __always_inline int complete_errno(__u64 error)
{
	return targ_complete_errno ? (int)(__s32)error : blk_status_errno((__u8)error);
}

IOS_TP(rq_complete, block_rq_complete,
       on_rq(rq, IOS_TA_COMPLETE, IOS_TC_COMPLETE, 1, nr_bytes, complete_errno(error), 0, 0, btf),
       struct request *rq, __u64 error, unsigned int nr_bytes)
IOS_TP(bio_complete, block_bio_complete, on_bio_complete(bio, btf), struct request_queue *q, struct bio *bio)

IOS_BLOCK_TP(split, block_split, on_bio(bio, IOS_TA_SPLIT, 0, new_sector, 0, btf), struct bio *bio,
	     unsigned int new_sector)
IOS_BLOCK_TP(bio_remap, block_bio_remap, on_bio(bio, IOS_TA_REMAP, IOS_TC_QUEUE, from, dev, btf), struct bio *bio,
	     dev_t dev, sector_t from)
IOS_BLOCK_TP(rq_remap, block_rq_remap, on_rq(rq, IOS_TA_REMAP, IOS_TC_QUEUE, 0, 0, 0, from, dev, btf),
	     struct request *rq, dev_t dev, sector_t from)

IOS_TP(plug, block_plug, on_plug(q, IOS_TA_PLUG, 0, btf), struct request_queue *q)
IOS_TP(unplug, block_unplug, on_plug(q, explicit ? IOS_TA_UNPLUG_IO : IOS_TA_UNPLUG_TIMER, depth, btf),
       struct request_queue *q, unsigned int depth, bool explicit)

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* task_rename: a new generation; every level compares the comm again at its next event. */
static __always_inline int on_rename(struct task_struct *task, const char *newcomm)
{
	__sync_fetch_and_add(&rename_gen, 1);
	return 0;
}

TASK_RENAME_PROGRAMS(on_rename)
