/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * iowait.bpf.h: the time each thread spends blocked in I/O waits, from the scheduler's tracepoints
 * alone (no delay accounting, kprobe or fentry): what iotop's IO> column shows, which needs
 * kernel.task_delayacct=1 (off by default since 5.14).
 *
 * An I/O wait is a sleep of a task whose in_iowait is set: io_schedule() and io_schedule_timeout()
 * set it around schedule(), and every wait for a page, a buffer, a bio or a request goes through them
 * (folio_wait_bit_common, __wait_on_buffer, submit_bio_wait, blk_mq_get_tag, the journal's and the
 * throttle's waits, swap-in's page lock). It starts where the scheduler takes the task off its run
 * queue (sched_switch: not a preemption, a state other than running, in_iowait set), and ends where
 * it is woken: sched_waking, in the waker's context (the I/O's completion), or, when the waker got there
 * before the blocking task's sched_switch ran (the task had just left its run queue), sched_wakeup, where
 * the task is put back on a run queue; whichever sees the wait first ends it. The time between the two
 * (an inter-processor interrupt that hands the wakeup to the task's CPU: microseconds on hardware,
 * milliseconds under an emulator) is scheduling latency, not I/O wait. The kernel's own delay
 * accounting measures nearly the same interval: delayacct_blkio_start() in the dequeue and
 * delayacct_blkio_end() in try_to_wake_up() when the task moves to another CPU, else in its activation
 * on its CPU, after that interrupt (kernel/sched/core.c); it is the ground truth the tests compare with,
 * but for one case: since 6.12 (commit 152e11f6df29, "sched/fair: Implement delayed dequeue"), EEVDF may leave a
 * blocked task on its run queue until its lag is repaid (se.sched_delayed); delay accounting then
 * starts at the delayed dequeue, or never when the task is woken before it. The task was blocked all
 * the same: such waits are counted here from the switch, and marked (delayed, delayed_ns).
 *
 * A swap-in is a wait with a swap-in function on the blocked task's kernel stack (do_swap_page, the
 * anonymous memory's fault; shmem_swapin_folio, tmpfs's; swap_readpage/swap_read_folio, the read itself,
 * where 5.10 waits for a single page read synchronously, under shmem_swapin_page 9 frames down): their
 * [start, end) come from /proc/kallsyms
 * (targ_swapin_fns, set by user space; all 0: not looked for). Such a wait is an I/O wait too, as in the
 * kernel's delay accounting, whose swap-in delay (iotop's SWAPIN) wraps waits that its blkio delay (IO>)
 * counts as well. The stack is read only for a task that blocks in an I/O wait while the host has swap in
 * use (iowait_swap_used), IOWAIT_SWAPIN_DEPTH frames deep (a wait in reclaim that a swap-in's charge
 * entered, deeper, is not looked for); see docs/top.md for its cost (bench/iowait_overhead.py --workload
 * direct), nothing on a host without swap.
 *
 * Two hash maps keyed by thread id: iowait_starts (the waits in progress, read by user space to count
 * the part of a long wait that falls in each interval, and to show who is blocked now) and iowait_tids
 * (the waits ended: time and number, never reset; user space takes differences and removes the threads
 * that exited: top's, which calls iowait_add_total; agg leaves it empty).
 *
 * The object defines, before including this:
 *   bool iowait_began(void *ctx, struct iowait_start *s): a wait begins (the blocking task is current);
 *     it may fill the start's stacks, and returns false for a task it does not want (-p);
 *   void iowait_ended(const struct iowait_start *s, __u32 tid, __u64 ns): a wait of ns ended (the waker's
 *     context: any task, any CPU, possibly an interrupt).
 */
#ifndef IOWAIT_BPF_H
#define IOWAIT_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "twins.bpf.h"
#include "common.bpf.h"
#include "cgroup.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* threads blocked at once */
	__type(key, __u32);
	__type(value, struct iowait_start);
} iowait_starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768); /* threads that waited; user space removes those that exited */
	__type(key, __u32);
	__type(value, struct iowait_val);
} iowait_tids SEC(".maps");

static struct iowait_val zero_iowait;

#define IOWAIT_SWAPIN_FNS 4
#define IOWAIT_SWAPIN_DEPTH 12 /* the swap-in function is the 5th to 8th frame under __schedule, 3 more under the program */
const volatile __u64 targ_swapin_fns[IOWAIT_SWAPIN_FNS][2] = {}; /* [start, end) of each; 0: none */

/* 1 while the host has swap in use (user space: kernel/iowait.py SwapGate, from /proc/meminfo once a
 * refresh): a host without swap, or none used, never has a swap-in, and no stack is read there */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} iowait_swap_used SEC(".maps");

struct iowait_stack {
	__u64 ip[IOWAIT_SWAPIN_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct iowait_stack);
} iowait_stack_buf SEC(".maps");

/* Is the current task, blocking, in a swap-in? One read of its kernel stack, compared with the swap-in
 * functions' ranges. */
static __always_inline bool iowait_in_swapin(void *ctx)
{
	struct iowait_stack *st;
	__u32 zero = 0, *used;
	long n;

	if (!targ_swapin_fns[0][0])
		return false;
	used = bpf_map_lookup_elem(&iowait_swap_used, &zero);
	if (!used || !*used)
		return false;
	st = bpf_map_lookup_elem(&iowait_stack_buf, &zero);
	if (!st)
		return false;
	n = bpf_get_stack(ctx, st->ip, sizeof(st->ip), 0);
	if (n <= 0)
		return false;
	n /= sizeof(__u64);
	for (int i = 0; i < IOWAIT_SWAPIN_DEPTH; i++) {
		if (i >= n)
			break;
		for (int f = 0; f < IOWAIT_SWAPIN_FNS; f++) {
			if (st->ip[i] >= targ_swapin_fns[f][0] && st->ip[i] < targ_swapin_fns[f][1])
				return true;
		}
	}
	return false;
}

/* Before 5.14 (commit 2f064a59a11f, "sched: Change task_struct::state"), the state was a long named
 * state; it is an unsigned int named __state since. */
struct task_struct___state_long {
	long state;
} __attribute__((preserve_access_index));

static __always_inline unsigned long task_state(struct task_struct *p, const bool btf)
{
	if (bpf_core_field_exists(p->__state))
		return IOS_READ(btf, p, __state);
	return IOS_READ(btf, (struct task_struct___state_long *)p, state);
}

/* EEVDF delayed the dequeue of a task that blocked (6.12+; absent before: never delayed). */
static __always_inline bool task_dequeue_delayed(struct task_struct *task, const bool btf)
{
	if (!bpf_core_field_exists(task->se.sched_delayed))
		return false;
	return IOS_READ(btf, task, se.sched_delayed);
}

/* in_iowait is a bit field: read through CO-RE's byte offset and shifts (a plain load of the bytes
 * holding it under tp_btf, bpf_probe_read_kernel under raw_tp). */
static __always_inline bool task_in_iowait(struct task_struct *task, const bool btf)
{
	/* (not named p: libbpf's macros declare a p of their own) */
	if (btf)
		return BPF_CORE_READ_BITFIELD(task, in_iowait);
	return BPF_CORE_READ_BITFIELD_PROBED(task, in_iowait);
}

/* The thread's ended waits, for a tool that reads them as totals (top: kernel/iowait.py). */
static __always_inline void iowait_add_total(const struct iowait_start *s, __u32 tid, __u64 delta)
{
	struct iowait_val *v = lookup_or_init(&iowait_tids, &tid, &zero_iowait);

	if (!v) {
		stat_inc(IOS_LOST_IOWAIT_FULL);
		return;
	}
	/* one wakeup per wait of a thread (try_to_wake_up under the task's pi_lock): no other writer */
	v->ns += delta;
	v->waits += 1;
	if (s->delayed) {
		v->delayed += 1;
		v->delayed_ns += delta;
	}
	if (s->swapin) {
		v->swapins += 1;
		v->swapin_ns += delta;
	}
	v->tgid = s->tgid;
	v->cgroup = s->cgroup;
}

/* sched_switch: prev (the current task) leaves its CPU. A wait begins when it blocks (not preempted,
 * not running: the scheduler dequeued it) with in_iowait set. */
static __always_inline int iowait_switch(void *ctx, bool preempt, struct task_struct *prev, const bool btf)
{
	struct iowait_start s = {};
	struct cgroup *cg;
	__u64 id;
	__u32 tid;

	if (preempt || !task_in_iowait(prev, btf) || !task_state(prev, btf))
		return 0;
	id = bpf_get_current_pid_tgid();
	tid = (__u32)id;
	cg = task_io_cgroup();
	if (!tid || !cgroup_wanted(cg))
		return 0;
	s.ns = bpf_ktime_get_ns();
	s.nvcsw = IOS_READ(btf, prev, nvcsw);
	s.cgroup = cgroup_kn_id(cg);
	s.tgid = id >> 32;
	s.kstack = -1;
	s.ustack = -1;
	s.delayed = task_dequeue_delayed(prev, btf);
	if (!iowait_began(ctx, &s))
		return 0;
	s.swapin = iowait_in_swapin(ctx);
	if (map_update(&iowait_starts, &tid, &s, BPF_ANY))
		stat_inc(IOS_LOST_IOWAIT_FULL);
	return 0;
}

/* sched_waking, then sched_wakeup: p is woken. The first that finds p's wait (its start is held, and p
 * has not run since: the same voluntary switch count) ends it; a start whose wakeup no program saw is
 * dropped when p blocks again. */
static __always_inline int iowait_wakeup(struct task_struct *p, const bool btf)
{
	struct iowait_start *s, copy;
	__u64 now;
	__u32 tid;

	if (!task_in_iowait(p, btf))
		return 0;
	tid = IOS_READ(btf, p, pid);
	s = bpf_map_lookup_elem(&iowait_starts, &tid);
	if (!s)
		return 0; /* blocked before tracing began, or filtered out (-c) */
	now = bpf_ktime_get_ns();
	if (s->nvcsw != IOS_READ(btf, p, nvcsw) || s->ns > now) {
		stat_inc(IOS_STAT_IOWAIT_STALE);
		map_delete(&iowait_starts, &tid, true);
		return 0;
	}
	copy = *s;
	map_delete(&iowait_starts, &tid, true);
	iowait_ended(&copy, tid, now - copy.ns);
	return 0;
}

/* The programs (a prefix of sched_switch's arguments: 5.10's has no prev_state, 5.18's on do). */
#define IOWAIT_PROGRAMS                                                                               \
	IOS_TP(sched_switch, sched_switch, iowait_switch(ctx, preempt, prev, btf), bool preempt,     \
	       struct task_struct *prev, struct task_struct *next)                                   \
	IOS_TP(sched_waking, sched_waking, iowait_wakeup(p, btf), struct task_struct *p)              \
	IOS_TP(sched_wakeup, sched_wakeup, iowait_wakeup(p, btf), struct task_struct *p)

#endif /* IOWAIT_BPF_H */
