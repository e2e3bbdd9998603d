// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope readsize and ioscope fair: per process, the sizes of the reads (and
 * with targ_writes, writes) the application asked for and got back, beside
 * the block I/O it queued (bio sizes, readahead or not). Everything is
 * aggregated here; user space reads the per-process map once per interval.
 *
 * Syscalls are seen at the raw sys_exit tracepoint (one tracepoint for all
 * syscalls, filtered by number; on x86-64 without sys_enter, see below). Only
 * reads of regular files and block devices count, so pipes, sockets and
 * terminals do not blur the picture; with a disk filter, only files on it.
 * Block I/O is attributed at block_bio_queue to the process in context, which
 * for buffered reads (and their readahead) is the reader itself. A read bio
 * queued by a kernel thread (blk-throttle dispatching bios it held back,
 * for one) is given to the process whose readahead last touched the file the
 * bio's first page belongs to, when there is one.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "twins.bpf.h"
#include "core_fixes.bpf.h"
#include "block.bpf.h"
#include "hist.bpf.h"
#include "ra.h"
#define IOS_STATS_SIZE RS_NR_STATS
#include "common.bpf.h"
#define COMMS_MAP 0
#include "comms.bpf.h"
#include "cgroup.bpf.h"

#define MAX_IOV 16
#define S_IFMT 00170000
#define S_IFREG 0100000
#define S_IFBLK 0060000

const volatile __u32 targ_tgid = 0;
const volatile bool targ_filter_comm = false;
const volatile bool targ_writes = false;
const volatile bool targ_per_disk = false; /* fair: also count bytes per process and device */
const volatile bool targ_proc_cgroup = false; /* -c/-G: each process's cgroup id in its rs_val */
const volatile char targ_comm[16] = {};
/* syscall numbers of this architecture, set by user space; -1 = none */
const volatile __s32 nr_read = -1;
const volatile __s32 nr_pread64 = -1;
const volatile __s32 nr_readv = -1;
const volatile __s32 nr_preadv = -1;
const volatile __s32 nr_preadv2 = -1;
const volatile __s32 nr_write = -1;
const volatile __s32 nr_pwrite64 = -1;
const volatile __s32 nr_writev = -1;
const volatile __s32 nr_pwritev = -1;
const volatile __s32 nr_pwritev2 = -1;
const volatile __s32 nr_io_submit = -1;
const volatile __s32 nr_io_getevents = -1;
const volatile __s32 nr_io_pgetevents = -1;

/* sys_enter -> sys_exit (not on x86-64). LRU: a thread killed inside a syscall leaves no leak. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* thread id */
	__type(value, struct rs_inflight);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rs_key);
	__type(value, struct rs_val);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, struct rs_rq_key);
	__type(value, struct hist);
} rq_sizes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct inode * */
	__type(value, struct rs_owner);
} owners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct rs_disk_key);
	__type(value, struct rs_disk_val);
} proc_disks SEC(".maps");

/* libaio iocbs and io_uring requests in flight (submitted, not completed). LRU: a request whose
 * completion is never seen (the process died, io_destroy) leaves no leak. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rs_async_key);
	__type(value, struct rs_async);
} async_reqs SEC(".maps");

static struct rs_val zero_val;
static struct rs_disk_val zero_disk_val;

/* Add bytes to (tgid, op, dev) in proc_disks (fair's per-disk groups): app = syscall bytes, else a bio's
 * (ra: a readahead bio). */
static __always_inline void per_disk_add(__u32 tgid, __u32 op, __u32 dev, __u64 bytes, bool app, bool ra)
{
	struct rs_disk_key key = { .tgid = tgid, .op = op, .dev = dev };
	struct rs_disk_val *v = lookup_or_init(&proc_disks, &key, &zero_disk_val);

	if (!v) {
		stat_inc(RS_LOST_PROC_FULL);
		return;
	}
	if (app) {
		__sync_fetch_and_add(&v->app_bytes, bytes);
		__sync_fetch_and_add(&v->app_count, 1);
		return;
	}
	__sync_fetch_and_add(&v->dev_bytes, bytes);
	if (ra)
		__sync_fetch_and_add(&v->ra_bytes, bytes);
}

/* The -c filter against the current task's comm, or against comm when given. */
static __always_inline bool comm_matches(const char *other)
{
	char comm[16];
	int i;

	if (!targ_filter_comm)
		return true;
	if (other)
		bpf_probe_read_kernel_str(comm, sizeof(comm), other);
	else
		bpf_get_current_comm(comm, sizeof(comm));
	for (i = 0; i < 16; i++) {
		if (comm[i] != targ_comm[i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

static __always_inline struct rs_val *proc_val(__u32 tgid, __u32 op, const char *comm)
{
	struct rs_key key = { .tgid = tgid, .op = op };
	struct rs_val *v = lookup_or_init(&procs, &key, &zero_val);

	if (!v) {
		stat_inc(RS_LOST_PROC_FULL);
		return NULL;
	}
	if (!v->comm[0]) {
		if (comm)
			bpf_probe_read_kernel_str(v->comm, sizeof(v->comm), comm);
		else
			process_comm(v->comm);
	}
	/* -c/-G: the process's cgroup while it lives (user space reads /proc/PID/cgroup too late for a process
	 * that exits within the interval); only in its own context (an async completion may run elsewhere) */
	if (targ_proc_cgroup && !v->cgroup && (bpf_get_current_pid_tgid() >> 32) == tgid)
		v->cgroup = cgroup_kn_id(task_io_cgroup());
	return v;
}

/* Linux 6.2+: view a kernel pointer as a BTF type, for plain (fault-safe) loads. Weak: the
 * object loads on kernels without it, where user space loads the raw_tp syscall programs that
 * do not call it (collector.py: _need_kfunc). */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/* The device of an open file: s_dev of a regular file's filesystem, i_rdev of a block device, else 0.
 * btf: file is a BTF pointer (plain loads). */
static __always_inline __u32 file_dev(struct file *file, const bool btf)
{
	struct inode *inode = IOS_READ(btf, file, f_inode);
	__u32 mode;

	if (!inode)
		return 0;
	mode = IOS_READ(btf, inode, i_mode) & S_IFMT;
	if (mode == S_IFREG)
		return IOS_READ(btf, inode, i_sb, s_dev);
	if (mode == S_IFBLK)
		return IOS_READ(btf, inode, i_rdev);
	return 0;
}

/* The device a syscall on fd reads: s_dev of a file's filesystem, i_rdev of a
 * block device; 0 (do not count) for pipes, sockets, terminals and the like.
 * btf: the program may load through BTF pointers directly (tp_btf, and the
 * bpf_rdonly_cast kfunc for the file), which is much cheaper than a
 * bpf_probe_read_kernel per pointer; user space falls back to the raw_tp
 * variant when the kernel lacks bpf_rdonly_cast or refuses the void * cast
 * (btf_id 0), which older kernels do. */
static __always_inline __u32 fd_dev(int fd, const bool btf)
{
	struct task_struct *task = btf ? bpf_get_current_task_btf() : (void *)bpf_get_current_task();
	struct fdtable *fdt = IOS_READ(btf, task, files, fdt);
	struct file **arr;
	struct file *file = NULL;
	unsigned int max;

	if (!fdt)
		return 0;
	max = IOS_READ(btf, fdt, max_fds);
	arr = IOS_READ(btf, fdt, fd);
	if (fd < 0 || (unsigned int)fd >= max)
		return 0;
	if (btf) {
		/* an untrusted void * view of the fd array: a plain fault-safe load */
		struct file **fds = bpf_rdonly_cast(arr, 0);

		file = fds[fd & 0xfffff];
		if (file)
			file = bpf_rdonly_cast(file, bpf_core_type_id_kernel(struct file));
	} else if (bpf_probe_read_kernel(&file, sizeof(file), &arr[fd])) {
		return 0;
	}
	if (!file)
		return 0;
	return file_dev(file, btf);
}

static __always_inline __u64 iov_bytes(const struct iovec *iov, __u64 cnt)
{
	__u64 total = 0;
	int i;

	for (i = 0; i < MAX_IOV; i++) {
		struct iovec v;

		if (i >= cnt)
			break;
		if (bpf_probe_read_user(&v, sizeof(v), &iov[i]))
			break;
		total += v.iov_len;
	}
	if (cnt > MAX_IOV)
		stat_inc(RS_STAT_IOV_TRUNC);
	return total;
}

/* Which syscalls count: 0 = none, else op + 1; *vec for the iovec ones. */
static __always_inline int classify(long id, bool *vec)
{
	*vec = false;
	if (id == nr_read || id == nr_pread64)
		return RS_OP_READ + 1;
	*vec = true;
	if (id == nr_readv || id == nr_preadv || id == nr_preadv2)
		return RS_OP_READ + 1;
	if (!targ_writes)
		return 0;
	if (id == nr_writev || id == nr_pwritev || id == nr_pwritev2)
		return RS_OP_WRITE + 1;
	*vec = false;
	if (id == nr_write || id == nr_pwrite64)
		return RS_OP_WRITE + 1;
	return 0;
}

/* One read or write done (a syscall, or an async request at its completion): comm NULL = the current
 * process's. */
static __always_inline void record_io(__u32 tgid, __u32 op, __u64 req, long ret, __u32 dev, const char *comm)
{
	struct rs_val *v = proc_val(tgid, op, comm);
	__u64 got;

	if (targ_per_disk && ret > 0)
		per_disk_add(tgid, op, dev, (__u64)ret, true, false);
	if (!v)
		return;
	hist_add(&v->app_req, req);
	if (ret < 0) {
		__sync_fetch_and_add(&v->app_errors, 1);
		return;
	}
	/* one unsigned value from here: of io_uring's int res clang kept sign-extended copies, bounded one
	 * and indexed the histogram with another where it knew the value small (hist_bucket's v < 8 path),
	 * which 5.10's and 6.1's verifiers refused ("math between map_value pointer and register with
	 * unbounded min value"). Here, not in hist_add: a barrier there made 6.1 walk impossible paths of
	 * lat's throttle program and refuse it (misaligned access). */
	got = (__u64)ret;
	barrier_var(got);
	hist_add(&v->app_ret, got);
	if (got < req)
		__sync_fetch_and_add(&v->app_short, 1);
}


/* --- async I/O --------------------------------------------------------------------------------
 * A libaio or io_uring read/write is remembered at its submission (who, which direction, which file's
 * device, the size asked) and counted at its completion with the bytes done, as a syscall is at its
 * return: the same per-process values, so readsize and fair see it like a read or write. */

/* rs_inflight.op of a libaio call (sys_enter + sys_exit): RS_IN_AIO + 1 io_submit, + 2 io_getevents,
 * the user array (iocbpp, events) in req */
#define RS_IN_AIO 16
/* iocbs per io_submit, events per io_getevents, read by the program; the rest are counted in RS_LOST_AIO.
 * fio submits and reaps up to its iodepth per call. sys_exit verifies in 22,866 instructions on 6.18 at 256
 * (14,799 at 32): each of the two loops adds about 16 per iocb or event. */
#define AIO_MAX_BATCH 256
#define IOCB_CMD_PREAD 0
#define IOCB_CMD_PWRITE 1
#define IOCB_CMD_PREADV 7
#define IOCB_CMD_PWRITEV 8
#define IORING_OP_READV 1
#define IORING_OP_WRITEV 2
#define IORING_OP_READ_FIXED 4
#define IORING_OP_WRITE_FIXED 5
#define IORING_OP_READ 22
#define IORING_OP_WRITE 23

/* struct iocb's first fields and struct io_event (uapi linux/aio_abi.h: fixed layout, x86-64/arm64) */
struct rs_user_iocb {
	__u64 data;
	__u32 key;
	__u32 rw_flags;
	__u16 opcode;
	__s16 reqprio;
	__u32 fildes;
	__u64 buf;
	__u64 nbytes;
};

struct rs_user_event {
	__u64 data;
	__u64 obj; /* the iocb's user address */
	__s64 res;
	__s64 res2;
};

/* A request submitted: remember it until its completion. comm NULL: the current process's. */
static __always_inline void async_start(struct rs_async_key *key, __u32 tgid, __u32 op, __u64 req, __u32 dev,
					 const char *comm)
{
	struct rs_async a = { .req = req, .tgid = tgid, .op = op, .dev = dev };

	if (comm)
		bpf_probe_read_kernel_str(a.comm, sizeof(a.comm), comm);
	else
		process_comm(a.comm);
	map_update(&async_reqs, key, &a, BPF_ANY);
}

/* A request completed with res (bytes or -errno): count it for its submitter. dev: the file's device
 * when the submission could not tell it (0: unknown). rw: the completion is known to be of a read or
 * write this tool counts (io_uring 6.1+), so a missing submission was one made before the start. */
static __always_inline void async_done(struct rs_async_key *key, long res, __u32 dev, bool rw)
{
	struct rs_async *a = bpf_map_lookup_elem(&async_reqs, key);
	struct rs_async seen;

	if (!a) {
		if (rw && !targ_tgid && !targ_filter_comm && dev && dev_wanted(dev))
			stat_inc(RS_STAT_ASYNC_UNSEEN);
		return;
	}
	seen = *a;
	map_delete(&async_reqs, key, true);
	if (seen.dev)
		dev = seen.dev;
	if (!dev || !dev_wanted(dev))
		return;
	record_io(seen.tgid, seen.op, seen.req, res, dev, seen.comm);
}

/* Add n to a counter of stats. */
static __always_inline void stat_add(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		__sync_fetch_and_add(v, n);
}

/*
 * One iocb io_submit accepted (pp: the user address of its pointer in the call's array): remembered
 * when it reads or writes a file on a traced disk. A global function, which the verifier checks once on
 * its own (scalar arguments only, all a 5.10 global function may take), as aio_event: inlined in the
 * loops over a call's iocbs and events, 32 of each were more than the verifier of 6.18 would check on
 * sys_exit (a million instructions). An iocb that cannot be read (its user page not resident) is
 * counted in RS_LOST_AIO: its request is never counted.
 */
__noinline int aio_iocb(__u64 tgid, __u64 pp)
{
	struct rs_async_key key = { .b = tgid, .kind = RS_ASYNC_AIO };
	struct rs_user_iocb cb;
	__u64 p, req;
	__u32 op, dev;
	bool vec;

	if (bpf_probe_read_user(&p, sizeof(p), (void *)pp) || bpf_probe_read_user(&cb, sizeof(cb), (void *)p)) {
		stat_inc(RS_LOST_AIO);
		return 0;
	}
	vec = cb.opcode == IOCB_CMD_PREADV || cb.opcode == IOCB_CMD_PWRITEV;
	if (cb.opcode == IOCB_CMD_PREAD || cb.opcode == IOCB_CMD_PREADV)
		op = RS_OP_READ;
	else if ((cb.opcode == IOCB_CMD_PWRITE || cb.opcode == IOCB_CMD_PWRITEV) && targ_writes)
		op = RS_OP_WRITE;
	else
		return 0;
	dev = fd_dev((int)cb.fildes, false);
	if (!dev || !dev_wanted(dev))
		return 0;
	req = vec ? iov_bytes((const struct iovec *)cb.buf, cb.nbytes) : cb.nbytes;
	key.a = p;
	async_start(&key, (__u32)tgid, op, req, dev, NULL);
	return 0;
}

/* One event io_getevents returned (ev: its user address): counted for its iocb; one that cannot be read
 * is counted in RS_LOST_AIO (its iocb stays in async_reqs, an LRU map). */
__noinline int aio_event(__u64 tgid, __u64 ev)
{
	struct rs_async_key key = { .b = tgid, .kind = RS_ASYNC_AIO };
	struct rs_user_event e;

	if (bpf_probe_read_user(&e, sizeof(e), (void *)ev)) {
		stat_inc(RS_LOST_AIO);
		return 0;
	}
	key.a = e.obj;
	async_done(&key, e.res, 0, false);
	return 0;
}

/* io_submit returned ret: the first ret iocbs of iocbpp were accepted; those past AIO_MAX_BATCH are
 * counted in RS_LOST_AIO, one each. The loop keeps no state but i (the losses are counted before it and
 * in aio_iocb): a count carried through it made the verifier's states grow with the square of the batch. */
static __always_inline void aio_submitted(__u32 tgid, const __u64 *iocbpp, long ret)
{
	int i;

	if (ret > AIO_MAX_BATCH)
		stat_add(RS_LOST_AIO, ret - AIO_MAX_BATCH);
	for (i = 0; i < AIO_MAX_BATCH; i++) {
		if (i >= ret)
			break;
		aio_iocb(tgid, (__u64)&iocbpp[i]);
	}
}

/* io_getevents / io_pgetevents returned ret events in the user array events: as aio_submitted. */
static __always_inline void aio_reaped(__u32 tgid, const struct rs_user_event *events, long ret)
{
	int i;

	if (ret > AIO_MAX_BATCH)
		stat_add(RS_LOST_AIO, ret - AIO_MAX_BATCH);
	for (i = 0; i < AIO_MAX_BATCH; i++) {
		if (i >= ret)
			break;
		aio_event(tgid, (__u64)&events[i]);
	}
}

/* The libaio syscalls: 1 io_submit, 2 io_getevents or io_pgetevents, 0 neither. */
static __always_inline int aio_call(long id)
{
	if (id == nr_io_submit)
		return 1;
	if (id == nr_io_getevents || id == nr_io_pgetevents)
		return 2;
	return 0;
}

#if defined(__TARGET_ARCH_x86) && !defined(RS_ENTER_EXIT)
/*
 * x86-64 keeps the syscall number (orig_ax) and the arguments (di, si, dx) in
 * the saved user registers until the syscall returns, so sys_exit alone sees
 * everything: one program run per syscall instead of two, and no per-thread
 * state. (Other architectures overwrite the first argument with the return
 * value and use the sys_enter + sys_exit pair below.)
 */
#define RS_EXIT_ONLY 1

static __always_inline int on_sys_exit_regs(struct pt_regs *regs, long ret, const bool btf)
{
	__u64 a1, a2, a3, req;
	long id;
	__u32 tgid, dev;
	bool vec;
	int op, aio = 0;

	id = (long)IOS_READ(btf, regs, orig_ax);
	op = classify(id, &vec);
	if (!op) {
		aio = aio_call(id);
		if (!aio || ret <= 0)
			return 0;
	}
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (targ_tgid && tgid != targ_tgid)
		return 0;
	if (!comm_matches(NULL))
		return 0;
	if (aio == 1) /* io_submit(ctx, nr, iocbpp) */
		aio_submitted(tgid, (const __u64 *)IOS_READ(btf, regs, dx), ret);
	else if (aio == 2) /* io_getevents(ctx, min_nr, nr, events, timeout) */
		aio_reaped(tgid, (const struct rs_user_event *)IOS_READ(btf, regs, r10), ret);
	if (aio)
		return 0;
	a1 = IOS_READ(btf, regs, di);
	a2 = IOS_READ(btf, regs, si);
	a3 = IOS_READ(btf, regs, dx);
	dev = fd_dev((int)a1, btf);
	if (!dev || !dev_wanted(dev))
		return 0;
	req = vec ? iov_bytes((const struct iovec *)a2, a3) : a3;
	record_io(tgid, op - 1, req, ret, dev, NULL);
	return 0;
}

IOS_TP(sys_exit, sys_exit, on_sys_exit_regs(regs, ret, btf), struct pt_regs *regs, long ret)

#else

static __always_inline int on_sys_enter(struct pt_regs *regs, long id, const bool btf)
{
	struct rs_inflight in = {};
	__u64 pid_tgid, a3;
	__u32 tid, dev;
	bool vec;
	int op, fd, aio;

	op = classify(id, &vec);
	aio = op ? 0 : aio_call(id);
	if (!op && !aio)
		return 0;
	in.op = op ? op - 1 : RS_IN_AIO + aio;
	pid_tgid = bpf_get_current_pid_tgid();
	if (targ_tgid && (pid_tgid >> 32) != targ_tgid)
		return 0;
	if (!comm_matches(NULL))
		return 0;
	if (aio) { /* the user array: io_submit's iocbpp (arg 3), io_getevents' events (arg 4) */
		in.req = aio == 1 ? PT_REGS_PARM3_CORE_SYSCALL(regs) : PT_REGS_PARM4_CORE_SYSCALL(regs);
		goto remember;
	}
	fd = (int)PT_REGS_PARM1_CORE_SYSCALL(regs);
	dev = fd_dev(fd, btf);
	if (!dev || !dev_wanted(dev))
		return 0;
	in.dev = dev;
	a3 = PT_REGS_PARM3_CORE_SYSCALL(regs);
	if (vec)
		in.req = iov_bytes((const struct iovec *)PT_REGS_PARM2_CORE_SYSCALL(regs), a3);
	else
		in.req = a3;
remember:
	tid = (__u32)pid_tgid;
	if (map_update(&inflight, &tid, &in, BPF_ANY))
		stat_inc(RS_LOST_INFLIGHT_FULL);
	return 0;
}

static __always_inline int on_sys_exit(long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct rs_inflight *in;
	__u64 req;
	__u32 op, dev;

	in = bpf_map_lookup_elem(&inflight, &tid);
	if (!in)
		return 0;
	req = in->req;
	op = in->op;
	dev = in->dev;
	map_delete(&inflight, &tid, false);
	if (op == RS_IN_AIO + 1 && ret > 0)
		aio_submitted(pid_tgid >> 32, (const __u64 *)req, ret);
	else if (op == RS_IN_AIO + 2 && ret > 0)
		aio_reaped(pid_tgid >> 32, (const struct rs_user_event *)req, ret);
	else if (op < RS_IN_AIO)
		record_io(pid_tgid >> 32, op, req, ret, dev, NULL);
	return 0;
}

IOS_TP(sys_enter, sys_enter, on_sys_enter(regs, id, btf), struct pt_regs *regs, long id)
IOS_TP(sys_exit, sys_exit, on_sys_exit(ret), struct pt_regs *regs, long ret)

#endif /* __TARGET_ARCH_x86 */


/* --- io_uring: the submit and complete tracepoints, whose arguments changed across kernels; user
 * space picks the programs that match this kernel's (their BTF: lib/ioscope/engines/procio/collector.py uring_hooks). ---- */

#define PF_KTHREAD 0x00200000

/* What io_uring_submit_req/sqe's request is: op + 1 (0: not a read/write); its size in *req and,
 * where the file is already set (5.10), its device in *dev. */
static __always_inline int uring_classify(struct io_kiocb *r, __u64 *req, __u32 *dev, bool user)
{
	struct io_rw *rw = (void *)r; /* a read/write's io_rw is the request's first member on 5.10-6.18 */
	__u8 opcode = BPF_CORE_READ(r, opcode);
	struct file *file;
	__u32 len = 0;
	__u64 addr;
	int op;

	if (opcode == IORING_OP_READ || opcode == IORING_OP_READV || opcode == IORING_OP_READ_FIXED)
		op = RS_OP_READ;
	else if ((opcode == IORING_OP_WRITE || opcode == IORING_OP_WRITEV || opcode == IORING_OP_WRITE_FIXED) &&
		 targ_writes)
		op = RS_OP_WRITE;
	else
		return 0;
	file = BPF_CORE_READ(r, file);
	*dev = file ? file_dev(file, false) : 0; /* 6.1+: set at issue, read at completion */
	if (*dev && !dev_wanted(*dev))
		return 0;
	/* len is u64 on 5.10, u32 later: its low half (little-endian) is the size either way */
	bpf_probe_read_kernel(&len, sizeof(len), __builtin_preserve_access_index(&rw->len));
	*req = len;
	if (opcode == IORING_OP_READV || opcode == IORING_OP_WRITEV) {
		addr = BPF_CORE_READ(rw, addr);
		*req = user ? iov_bytes((const struct iovec *)addr, len) : 0;
	}
	return op + 1;
}

struct io_kiocb___task {
	struct task_struct *task;
} __attribute__((preserve_access_index));

static __always_inline int uring_submit(struct io_kiocb *r, __u64 a, __u64 b)
{
	struct task_struct *task = (void *)bpf_get_current_task();
	struct rs_async_key key = { .a = a, .b = b, .kind = RS_ASYNC_URING };
	const char *comm = NULL;
	__u32 tgid, dev = 0;
	bool user = true;
	__u64 req = 0;
	int op;

	if (BPF_CORE_READ(task, flags) & PF_KTHREAD) {
		/* 5.10's SQPOLL thread is a kernel thread: the request's task submitted it */
		struct io_kiocb___task *rt = (void *)r;

		if (!bpf_core_field_exists(rt->task))
			return 0;
		task = BPF_CORE_READ(rt, task);
		if (!task)
			return 0;
		comm = BPF_CORE_READ(task, group_leader, comm);
		user = false;
	}
	op = uring_classify(r, &req, &dev, user);
	if (!op)
		return 0;
	tgid = BPF_CORE_READ(task, tgid);
	if (targ_tgid && tgid != targ_tgid)
		return 0;
	if (!comm_matches(comm))
		return 0;
	async_start(&key, tgid, op - 1, req, dev, comm);
	return 0;
}

static __always_inline int uring_done(struct io_kiocb *r, __u64 a, __u64 b, long res)
{
	struct rs_async_key key = { .a = a, .b = b, .kind = RS_ASYNC_URING };
	struct file *file;
	__u8 opcode;

	if (!r) { /* 5.10: no request, the completion of any operation */
		async_done(&key, res, 0, false);
		return 0;
	}
	opcode = BPF_CORE_READ(r, opcode);
	if (opcode != IORING_OP_READ && opcode != IORING_OP_READV && opcode != IORING_OP_READ_FIXED &&
	    opcode != IORING_OP_WRITE && opcode != IORING_OP_WRITEV && opcode != IORING_OP_WRITE_FIXED)
		return 0; /* never remembered: no lookup */
	file = BPF_CORE_READ(r, file);
	async_done(&key, res, file ? file_dev(file, false) : 0, true);
	return 0;
}

/* 5.10 (Debian's, with the request): io_uring_submit_sqe(ctx, req, opcode, user_data, flags,
 * force_nonblock, sq_thread); io_uring_complete(ctx, user_data, res, cflags): joined on (ctx, user_data) */
IOS_TP(uring_sqe_ud, io_uring_submit_sqe, uring_submit(req, (__u64)ring, user_data),
       void *ring, struct io_kiocb *req, __u8 opcode, __u64 user_data)
IOS_TP(uring_cqe_ud, io_uring_complete, uring_done(NULL, (__u64)ring, user_data, res),
       void *ring, __u64 user_data, int res)
/* 6.1: io_uring_submit_sqe(req, force_nonblock); 6.5+: io_uring_submit_req(req) */
IOS_TP(uring_sqe, io_uring_submit_sqe, uring_submit(req, (__u64)req, 0), struct io_kiocb *req)
IOS_TP(uring_req, io_uring_submit_req, uring_submit(req, (__u64)req, 0), struct io_kiocb *req)
/* 6.1-6.12: io_uring_complete(ctx, req, user_data, res, cflags, extra1, extra2) (req NULL for a
 * completion of no request); 6.18: io_uring_complete(ctx, req, cqe) */
IOS_TP(uring_cqe, io_uring_complete, req ? uring_done(req, (__u64)req, 0, res) : 0,
       void *ring, struct io_kiocb *req, __u64 user_data, int res)
IOS_TP(uring_cqe_ptr, io_uring_complete,
       req ? uring_done(req, (__u64)req, 0, BPF_CORE_READ(cqe, res)) : 0,
       void *ring, struct io_kiocb *req, struct io_uring_cqe *cqe)

#define PAGE_MAPPING_FLAGS 0x3

/* The reader a kernel thread's read bio belongs to: owner of the first page's file. */
static __always_inline struct rs_owner *bio_owner(struct bio *bio)
{
	struct task_struct *task = (void *)bpf_get_current_task();
	struct address_space *mapping;
	struct inode *host;
	__u64 key;

	if (!(BPF_CORE_READ(task, flags) & PF_KTHREAD))
		return NULL;
	mapping = BPF_CORE_READ(bio, bi_io_vec, bv_page, mapping);
	if (!mapping || ((__u64)mapping & PAGE_MAPPING_FLAGS))
		return NULL; /* anonymous or movable: not a file page */
	host = BPF_CORE_READ(mapping, host);
	key = (__u64)host;
	return bpf_map_lookup_elem(&owners, &key);
}

static __always_inline int on_bio_queue(struct bio *bio)
{
	struct gendisk *disk = bio_disk(bio, false);
	struct rs_owner *owner = NULL;
	__u32 opf, bytes, op, tgid;
	struct rs_val *v;
	__u8 kop;

	if (!disk || !dev_wanted(disk_dev(disk, false)))
		return 0;
	opf = BPF_CORE_READ(bio, bi_opf);
	bytes = BPF_CORE_READ(bio, bi_iter.bi_size);
	kop = opf_to_op(opf, bytes);
	if (kop == IOS_OP_READ)
		op = RS_OP_READ;
	else if (kop == IOS_OP_WRITE && targ_writes)
		op = RS_OP_WRITE;
	else
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (op == RS_OP_READ) {
		owner = bio_owner(bio);
		if (owner) {
			tgid = owner->tgid;
			stat_inc(RS_STAT_KTHREAD_OWNER);
		}
	}
	if (targ_tgid && tgid != targ_tgid)
		return 0;
	if (targ_filter_comm && !comm_matches(owner ? owner->comm : NULL))
		return 0;
	if (targ_per_disk)
		per_disk_add(tgid, op, disk_dev(disk, false), bytes, false, bio_is_readahead(opf));
	v = proc_val(tgid, op, owner ? owner->comm : NULL);
	if (!v)
		return 0;
	hist_add(&v->dev, bytes);
	if (bio_is_readahead(opf)) {
		__sync_fetch_and_add(&v->ra_count, 1);
		__sync_fetch_and_add(&v->ra_bytes, bytes);
	}
	return 0;
}

static struct hist zero_hist;

/* The size of each request issued to the driver: what iostat's areq-sz averages. */
static __always_inline int on_rq_issue(struct request *rq)
{
	struct rs_rq_key key = {};
	__u32 bytes = BPF_CORE_READ(rq, __data_len);
	__u8 kop = opf_to_op(BPF_CORE_READ(rq, cmd_flags), bytes);
	struct hist *h;

	if (kop == IOS_OP_READ)
		key.op = RS_OP_READ;
	else if (kop == IOS_OP_WRITE && targ_writes)
		key.op = RS_OP_WRITE;
	else
		return 0;
	key.dev = rq_dev(rq, false);
	if (!dev_wanted(key.dev))
		return 0;
	h = lookup_or_init(&rq_sizes, &key, &zero_hist);
	if (!h) {
		stat_inc(RS_LOST_PROC_FULL);
		return 0;
	}
	hist_add(h, bytes);
	return 0;
}

IOS_BLOCK_TP(rq_issue, block_rq_issue, on_rq_issue(rq), struct request *rq)

/* A readahead decision: remember who reads this file ahead. */
static __always_inline int on_readahead(struct inode *inode)
{
	__u64 key = (__u64)inode;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct rs_owner *o = bpf_map_lookup_elem(&owners, &key);
	struct rs_owner n = {};

	if (o && o->tgid == tgid)
		return 0;
	n.tgid = tgid;
	process_comm(n.comm);
	map_update(&owners, &key, &n, BPF_ANY);
	return 0;
}

IOS_TP(sync_ra, page_cache_sync_ra, on_readahead(inode), struct inode *inode)
IOS_TP(async_ra, page_cache_async_ra, on_readahead(inode), struct inode *inode)

IOS_BLOCK_TP(bio_queue, block_bio_queue, on_bio_queue(bio), struct bio *bio)

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* task_rename: the process's name in its per-direction values follows exec and prctl (comms.bpf.h). */
static __always_inline int on_rename(struct task_struct *task, const char *newcomm)
{
	struct rs_key rd = { .tgid = renamed_tgid(task), .op = RS_OP_READ };
	struct rs_key wr = { .tgid = rd.tgid, .op = RS_OP_WRITE };
	struct rs_val *v;

	if (!rd.tgid)
		return 0;
	v = bpf_map_lookup_elem(&procs, &rd);
	if (v)
		bpf_probe_read_kernel_str(v->comm, sizeof(v->comm), newcomm);
	v = bpf_map_lookup_elem(&procs, &wr);
	if (v)
		bpf_probe_read_kernel_str(v->comm, sizeof(v->comm), newcomm);
	return 0;
}

TASK_RENAME_PROGRAMS(on_rename)
