// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope fileslower: the latency of each system call that does file I/O, with what the block layer and
 * the scheduler did while it ran, from tracepoints alone.
 *
 *  - raw_syscalls:sys_enter, every system call: a call whose number user space did not mark in
 *    targ_nr_call (one load) ends at once, so does a 32-bit task's (its numbers are others). A followed
 *    call's file is resolved from its fd (current->files->fdt->fd[fd], CO-RE reads); a call on anything but
 *    a regular file or a block device (a socket, a pipe, a tty) ends there, before any map is touched.
 *    Kept per thread (calls): start, file, device.
 *  - block:block_bio_queue, in the calling thread's context: the bios it queues (count, bytes, flags),
 *    each remembered (bios: address -> thread) until block_rq_complete ends it, adding its queue to
 *    completion time to the call (a bio that completes after the call is not counted in dev_ns).
 *  - sched:sched_switch, sched_waking, sched_wakeup: the time blocked in I/O waits (iowait.bpf.h, its
 *    hooks below add each wait to the thread's call) and off its CPU for any reason.
 *  - raw_syscalls:sys_exit: a followed number's (read from the saved registers), the latency goes into a log-linear histogram per (call, file[, process]
 *    [, cgroup]) in the kernel (hists, no event), and, at or above targ_min_ns, the whole record goes to
 *    user space through a ring buffer (events); a full ring buffer is counted (FS_LOST_EVENTS).
 *
 * Every hook is a twin (twins.bpf.h): tp_btf, else raw_tp. The raw syscall tracepoints pass the user's
 * registers: no perf record of the arguments is built (the classic syscalls:sys_enter_<call> tracepoints
 * built one for every call, and each of their 36 detaches waited for an RCU grace period).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "twins.bpf.h"
#include "fileslower.h"
#define IOS_STATS_SIZE FS_NR_STATS
#include "common.bpf.h"
#include "core_fixes.bpf.h"
#include "block.bpf.h"
#include "hist.bpf.h"
#include "cgroup.bpf.h"
#include "ptrval.bpf.h"
#include "fname.bpf.h"

#define FS_MAX_CHAIN 32 /* bios of a request walked at its completion */
#define FS_S_IFMT 00170000
#define FS_S_IFREG 0100000
#define FS_S_IFBLK 0060000

const volatile __u64 targ_min_ns = 10000000; /* -m: a call this slow or slower is sent as a record */
const volatile __u32 targ_tgid = 0;          /* -p */
const volatile __u32 targ_self = 0;          /* the tool's own process: its output is file I/O too */
const volatile bool targ_per_pid = false;    /* histograms per process */
const volatile bool targ_per_cgroup = false; /* per cgroup (and the cgroup read at each call's enter) */
/* by syscall number: 1 + enum fs_call of a followed call, 0 for any other (calls.py nr_table) */
const volatile __u8 targ_nr_call[FS_MAX_NR] = {};

/* x86: TS_COMPAT in thread_info.status, set while a 32-bit (ia32) system call runs (in_ia32_syscall()) */
#define FS_TS_COMPAT 0x0002

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* threads that made a followed call, alive */
	__type(key, __u32);
	__type(value, struct fs_state);
} calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* bios of calls in flight (LRU: one whose completion was never seen ages out) */
	__type(key, __u64);
	__type(value, struct fs_bio);
} bios SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct fs_hist_key);
	__type(value, struct hist);
} hists SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct fs_file_key);
	__type(value, struct agg_file);
} files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* user space may resize it */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct agg_file);
} file_scratch SEC(".maps");

static struct hist zero_hist;
/* the events' type in the object's BTF (only a size in the programs), for tests/test_abi.py */
struct fs_event *fs_event_type __attribute__((unused));

/* iowait.bpf.h's hooks: only the waits of a thread inside a followed call, added to that call. */
struct iowait_start;
static __always_inline bool iowait_began(void *ctx, struct iowait_start *s);
static __always_inline void iowait_ended(const struct iowait_start *s, __u32 tid, __u64 ns);
#include "iowait.bpf.h"

/* A thread's call in progress, NULL when it has none. A thread's entry in calls stays from its first
 * followed call to its exit (sched_process_exit), its start_ns 0 between calls: an enter overwrites it
 * and an exit zeroes start_ns, instead of a map update and a map delete per call. */
static __always_inline struct fs_state *call_of(__u32 tid)
{
	struct fs_state *c = bpf_map_lookup_elem(&calls, &tid);

	return c && c->start_ns ? c : NULL;
}

static __always_inline bool iowait_began(void *ctx, struct iowait_start *s)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	return call_of(tid) != NULL;
}

static __always_inline void iowait_ended(const struct iowait_start *s, __u32 tid, __u64 ns)
{
	struct fs_state *c = call_of(tid);

	/* the waker's context (any CPU): atomic adds */
	if (c && c->start_ns <= s->ns) {
		__sync_fetch_and_add(&c->iowait_ns, ns);
		__sync_fetch_and_add(&c->iowaits, 1);
	}
}

/* A kfunc of 6.2 on: a tp_btf program views the file read from the fd array as a struct file (plain,
 * fault-safe loads). Where the kernel lacks it, user space loads the raw_tp programs (collector.py). */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/* The inode behind fd in the current task, when it is a regular file or a block device (NULL for
 * anything else: sockets, pipes, ttys, anonymous inodes), and its device. btf (tp_btf): loads through the
 * current task's BTF pointers and one bpf_probe_read_kernel (the fd array's slot: a pointer to pointers
 * is not BTF-typed), instead of one bpf_probe_read_kernel per pointer (raw_tp, CO-RE reads). */
static __always_inline struct inode *fd_inode(long fd, __u32 *dev, const bool btf)
{
	struct task_struct *task = btf ? bpf_get_current_task_btf() : (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = IOS_READ(btf, task, files, fdt);
	struct file **fds;
	struct file *f = NULL;
	struct inode *inode;
	__u32 mode;

	if (fd < 0 || !fdt || fd >= IOS_READ(btf, fdt, max_fds))
		return NULL;
	fds = IOS_READ(btf, fdt, fd);
	if (!fds || bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return NULL;
	if (btf)
		f = bpf_rdonly_cast(f, bpf_core_type_id_kernel(struct file));
	inode = IOS_READ(btf, f, f_inode);
	if (!inode)
		return NULL;
	mode = IOS_READ(btf, inode, i_mode) & FS_S_IFMT;
	if (mode == FS_S_IFREG)
		*dev = IOS_READ(btf, inode, i_sb, s_dev);
	else if (mode == FS_S_IFBLK)
		*dev = IOS_READ(btf, inode, i_rdev);
	else
		return NULL;
	return inode;
}

/* io_submit(ctx, nr, iocbpp): the file of its first request (aio_fildes of *iocbpp[0]). */
static __always_inline long aio_first_fd(long nr, void *iocbpp)
{
	struct iocb *iocb = NULL;
	__u32 fd = 0;

	if (nr < 1 || bpf_probe_read_user(&iocb, sizeof(iocb), iocbpp) || !iocb ||
	    bpf_probe_read_user(&fd, sizeof(fd), (void *)iocb + __builtin_offsetof(struct iocb, aio_fildes)))
		return -1;
	return fd;
}

/* The followed call of a syscall number (enum fs_call), -1 for any other. */
static __always_inline int nr_call(long nr)
{
	if ((unsigned long)nr >= FS_MAX_NR)
		return -1; /* -1 (no syscall), x32's numbers (__X32_SYSCALL_BIT), ... */
	return (int)targ_nr_call[nr] - 1;
}

/* A 32-bit task's system call: its number is another table's (on x86, ia32's), left out. */
static __always_inline bool compat_call(const bool btf)
{
#if defined(__TARGET_ARCH_x86)
	struct task_struct *task = btf ? bpf_get_current_task_btf() : (struct task_struct *)bpf_get_current_task();

	return IOS_READ(btf, task, thread_info.status) & FS_TS_COMPAT;
#else
	return false; /* not told apart: docs/fileslower.md, "What it cannot see" */
#endif
}

/* The system call's number at sys_exit, from the saved user registers (-1: not known here, then every exit
 * looks for its thread's call). */
static __always_inline long exit_nr(struct pt_regs *regs, const bool btf)
{
#if defined(__TARGET_ARCH_x86)
	return IOS_READ(btf, regs, orig_ax);
#else
	return -1;
#endif
}

/* The system call's arguments in the user registers (tp_btf: plain loads, raw_tp: CO-RE reads). */
#define FS_ARG(btf, regs, n) ((btf) ? (long)PT_REGS_PARM##n##_SYSCALL(regs) : (long)PT_REGS_PARM##n##_CORE_SYSCALL(regs))

static __always_inline int fs_enter(struct pt_regs *regs, long nr, const bool btf)
{
	__u64 id;
	__u32 tid, dev = 0;
	struct inode *inode = NULL;
	struct fs_state s = {}, *c;
	long fd = -1, fd2 = -1;
	int call = nr_call(nr);

	if (call < 0 || compat_call(btf))
		return 0;
	id = bpf_get_current_pid_tgid();
	tid = (__u32)id;
	if ((targ_tgid && (id >> 32) != targ_tgid) || (id >> 32) == targ_self)
		return 0;
	switch (call) {
	case FS_IO_URING_ENTER:
		break; /* the ring's fd: its requests' files are not known here */
	case FS_IO_SUBMIT: /* (ctx, nr, iocbpp) */
		fd = aio_first_fd(FS_ARG(btf, regs, 2), (void *)FS_ARG(btf, regs, 3));
		break;
	case FS_SENDFILE64: /* (out_fd, in_fd, ...): the file read, else the one written */
		fd = FS_ARG(btf, regs, 2);
		fd2 = FS_ARG(btf, regs, 1);
		break;
	case FS_COPY_FILE_RANGE: /* (fd_in, off_in, fd_out, ...) */
	case FS_SPLICE:
		fd = FS_ARG(btf, regs, 1);
		fd2 = FS_ARG(btf, regs, 3);
		break;
	default:
		fd = FS_ARG(btf, regs, 1);
	}
	if (call != FS_IO_URING_ENTER) {
		inode = fd_inode(fd, &dev, btf);
		if (!inode && fd2 >= 0)
			inode = fd_inode(fd2, &dev, btf);
		if (!inode)
			return 0; /* not a file's I/O */
	}
	if (!dev_wanted(dev))
		return 0;
	if (targ_cgroup || targ_per_cgroup) {
		struct cgroup *cg = task_io_cgroup();

		if (!cgroup_wanted(cg))
			return 0;
		s.cgroup = cgroup_kn_id(cg);
	}
	s.inode = (__u64)inode;
	s.ino = inode ? IOS_READ(btf, inode, i_ino) : 0;
	s.dev = dev;
	s.call = call;
	s.start_ns = bpf_ktime_get_ns();
	c = bpf_map_lookup_elem(&calls, &tid);
	if (c)
		*c = s; /* the thread's entry since an earlier call */
	else if (map_update(&calls, &tid, &s, BPF_NOEXIST))
		stat_inc(FS_LOST_CALLS_FULL);
	return 0;
}

/* The histogram of a key, made (and its file's name noted) when first seen. */
static __always_inline struct hist *fs_hist(struct fs_hist_key *key, struct inode *inode)
{
	struct fs_file_key fk = {};
	struct agg_file *f;
	struct hist *h = bpf_map_lookup_elem(&hists, key);
	__u32 zero = 0;

	if (h)
		return h;
	h = map_init(&hists, key, &zero_hist);
	if (!h) {
		stat_inc(IOS_LOST_HIST_FULL);
		return NULL;
	}
	fk.ino = key->ino;
	fk.dev = key->dev;
	f = bpf_map_lookup_elem(&file_scratch, &zero);
	if (f && !bpf_map_lookup_elem(&files, &fk)) {
		if (inode) {
			fname_fill(f, inode);
		} else {
			f->ino = 0;
			f->dev = 0;
			f->depth = 0;
		}
		map_update(&files, &fk, f, BPF_NOEXIST);
	}
	return h;
}

static __always_inline int fs_exit(struct pt_regs *regs, long ret, const bool btf)
{
	long nr = exit_nr(regs, btf);
	int call = nr < 0 ? -1 : nr_call(nr);
	__u64 id, now;
	__u32 tid;
	struct fs_hist_key key = {};
	struct fs_state *c;
	struct fs_event *e;
	struct hist *h;
	__u64 lat;

	if (nr >= 0 && call < 0)
		return 0; /* a call not followed */
	id = bpf_get_current_pid_tgid();
	tid = (__u32)id;
	c = call_of(tid);
	if (!c)
		return 0; /* not followed: not a file, filtered out, or entered before tracing began */
	if (call < 0)
		call = c->call; /* the number is not known here: the thread's call in progress ends */
	if (c->call != call) {
		stat_inc(FS_STAT_EXIT_OTHER);
		c->start_ns = 0;
		return 0;
	}
	now = bpf_ktime_get_ns();
	lat = now - c->start_ns;
	key.call = call;
	key.ino = c->ino;
	key.dev = c->dev;
	key.tgid = targ_per_pid ? id >> 32 : 0;
	key.cgroup = targ_per_cgroup ? c->cgroup : 0;
	h = fs_hist(&key, (struct inode *)c->inode);
	if (h)
		hist_add(h, lat);
	if (lat >= targ_min_ns) {
		e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
		if (!e) {
			stat_inc(FS_LOST_EVENTS);
		} else {
			e->s = *c;
			if (!targ_cgroup && !targ_per_cgroup)
				e->s.cgroup = cgroup_kn_id(task_io_cgroup());
			e->ret = ret;
			e->end_ns = now;
			e->tid = tid;
			e->tgid = id >> 32;
			bpf_get_current_comm(e->comm, sizeof(e->comm));
			if (c->inode) {
				fname_fill(&e->file, (struct inode *)c->inode);
			} else {
				e->file.ino = 0;
				e->file.dev = 0;
				e->file.depth = 0;
			}
			bpf_ringbuf_submit(e, 0);
		}
	}
	c->start_ns = 0; /* no call in progress */
	return 0;
}

/* block_bio_queue: a bio the thread queues during its call. A bio queued again (a split's remainder) is
 * counted once. */
static __always_inline int fs_bio_queue(struct bio *bio, const bool btf)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct fs_state *c = call_of(tid);
	struct fs_bio b = {}, *old;
	__u32 size, opf;
	__u64 key;
	__u8 op;
	int err;

	if (!c)
		return 0;
	key = ptr_value(bio, btf);
	b.call_start = c->start_ns;
	b.q_ns = bpf_ktime_get_ns();
	b.tid = tid;
	err = map_update(&bios, &key, &b, BPF_NOEXIST);
	if (err == -EEXIST) {
		old = bpf_map_lookup_elem(&bios, &key);
		if (old && old->tid == tid && old->call_start == b.call_start)
			return 0; /* queued again: counted already */
		err = map_update(&bios, &key, &b, BPF_ANY); /* an earlier bio at this address, its end unseen */
	}
	if (err)
		stat_inc(FS_LOST_BIOS_FULL);
	size = IOS_READ(btf, bio, bi_iter.bi_size);
	opf = IOS_READ(btf, bio, bi_opf);
	op = opf_to_op(opf, size);
	/* the thread's own context: the only writer of these fields */
	if (op == IOS_OP_READ) {
		c->rbios += 1;
		c->rbytes += size;
	} else if (op == IOS_OP_WRITE) {
		c->wbios += 1;
		c->wbytes += size;
	} else {
		c->obios += 1;
	}
	if (op == IOS_OP_FLUSH || (opf & IOS_REQ_FLAG(__REQ_PREFLUSH)))
		c->flushes += 1;
	if (opf & IOS_REQ_FLAG(__REQ_FUA))
		c->fua += 1;
	if (opf & IOS_REQ_FLAG(__REQ_SYNC))
		c->sync += 1;
	return 0;
}

/* A bio of a followed call ended (a global function, verified once: scalar arguments only). */
__noinline int fs_bio_done(__u64 key, __u64 now)
{
	struct fs_bio *b = bpf_map_lookup_elem(&bios, &key);
	struct fs_state *c;
	__u64 start, q;
	__u32 tid;

	if (!b)
		return 0;
	start = b->call_start;
	q = b->q_ns;
	tid = b->tid;
	map_delete(&bios, &key, true);
	c = call_of(tid);
	if (c && c->start_ns == start && now > q) {
		__sync_fetch_and_add(&c->dev_ns, now - q);
		__sync_fetch_and_add(&c->bios_done, 1);
	}
	return 0;
}

/* block_rq_complete: the bios the completion ends (the data step of a flush sequence ends none: its
 * bios end with the sequence, rqpath.bpf.h). */
static __always_inline int fs_rq_complete(struct request *rq, unsigned int nr_bytes, const bool btf)
{
	struct bio *bio = IOS_READ(btf, rq, bio);
	__u32 rq_bytes, size;
	__u64 now, done = 0;
	bool whole;
	int i;

	if (!bio || rq_flush_seq(IOS_READ(btf, rq, rq_flags)))
		return 0;
	rq_bytes = IOS_READ(btf, rq, __data_len);
	whole = nr_bytes >= rq_bytes;
	now = bpf_ktime_get_ns();
	for (i = 0; i < FS_MAX_CHAIN && bio; i++) {
		size = IOS_READ(btf, bio, bi_iter.bi_size);
		if (!whole && done + size > nr_bytes)
			break; /* a partial completion ends only the bios it covers */
		done += size;
		fs_bio_done(ptr_value(bio, btf), now);
		bio = IOS_READ(btf, bio, bi_next);
	}
	return 0;
}

/* sched_switch: the I/O wait (iowait.bpf.h), then the time off CPU of a thread inside a call: prev
 * leaves its CPU, next comes back to one. */
static __always_inline int fs_switch(void *ctx, bool preempt, struct task_struct *prev, struct task_struct *next,
				     const bool btf)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct fs_state *c;
	__u64 now = 0, d;

	iowait_switch(ctx, preempt, prev, btf);
	c = tid ? call_of(tid) : NULL;
	if (c) {
		now = bpf_ktime_get_ns();
		c->off_ns = now;
		c->preempted = preempt || !task_state(prev, btf);
	}
	tid = IOS_READ(btf, next, pid);
	c = tid ? call_of(tid) : NULL;
	if (c && c->off_ns) {
		if (!now)
			now = bpf_ktime_get_ns();
		d = now > c->off_ns ? now - c->off_ns : 0;
		c->offcpu_ns += d;
		if (c->preempted)
			c->runq_ns += d;
		c->off_ns = 0;
	}
	return 0;
}

/* sched_process_exit: the thread's entry in calls goes with it. */
static __always_inline int fs_thread_exit(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	map_delete(&calls, &tid, true);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The programs: raw_syscalls' two (every system call, filtered by number), then the block and scheduler
 * hooks. */
IOS_TP(sys_enter, sys_enter, fs_enter(regs, id, btf), struct pt_regs *regs, long id)
IOS_TP(sys_exit, sys_exit, fs_exit(regs, ret, btf), struct pt_regs *regs, long ret)

IOS_BLOCK_TP(bio_queue, block_bio_queue, fs_bio_queue(bio, btf), struct bio *bio)
IOS_TP(rq_complete, block_rq_complete, fs_rq_complete(rq, nr_bytes, btf), struct request *rq, int error,
       unsigned int nr_bytes)
IOS_TP(sched_switch, sched_switch, fs_switch(ctx, preempt, prev, next, btf), bool preempt, struct task_struct *prev,
       struct task_struct *next)
IOS_TP(sched_waking, sched_waking, iowait_wakeup(p, btf), struct task_struct *p)
IOS_TP(sched_wakeup, sched_wakeup, iowait_wakeup(p, btf), struct task_struct *p)
IOS_TP(thread_exit, sched_process_exit, fs_thread_exit(), struct task_struct *p)
