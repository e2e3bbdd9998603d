// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope readahead: the kernel's readahead decisions and what became of the
 * pages they brought in.
 *
 *  page_cache_sync_ra / page_cache_async_ra   a decision (read missed the
 *        cache / read hit the PG_readahead mark); the tracepoint shows the
 *        state before the decision, so it only counts it and remembers its
 *        kind for this thread.
 *  page_cache_ra_order / page_cache_ra_unbounded   the window actually read:
 *        [index, index + size) with async_size pages of lookahead. The first
 *        one after a decision gives the decision's window; one without a
 *        decision (mmap read-around, fadvise, readahead(2)) is kind "other".
 *  mm_filemap_add_to_page_cache   a folio added by this thread inside its
 *        current window is a readahead page: one entry per page in `pages`,
 *        keyed by (dev, inode, index), with the time and the process.
 *  mm_filemap_get_pages   the page range a read asked for: tracked pages in
 *        it are "used" (age at first use into a histogram) and forgotten.
 *  mm_filemap_fault, mm_filemap_map_pages   the same for memory-mapped
 *        files: the page a fault asked for, and the cached pages fault-around
 *        mapped into the process (up to fault_around_bytes around the fault,
 *        so for mmap "used" means "mapped", an upper bound).
 *  mm_filemap_delete_from_page_cache   tracked pages still there were never
 *        asked for: "wasted".
 * What is left in `pages` at any time is "read ahead, still cached, not used
 * yet", so pages = used + wasted + still cached + untracked (map full).
 * A per-file count of tracked pages lets reads of other files return after
 * one lookup.
 *
 * Files are keyed by (s_dev, i_ino) as the page cache tracepoints name them.
 * A block device read through its own page cache (dd if=/dev/sdb) has its
 * pages in the block device's inode, in the kernel's bdev pseudo file system:
 * its s_dev is that file system's, the disk is the inode's i_rdev. -d filters
 * such a file on i_rdev, and `bdevs` tells user space which keys are block
 * devices (on 5.10 every block device inode has i_ino 0: two devices read at
 * once share one key there). `names` keeps each other file's path (fname.bpf.h).
 *
 * Kernels without these tracepoints (the readahead ones are in 6.18 but not
 * 6.12; mm_filemap_get_pages, _fault and _map_pages are in 6.12 but not 6.1)
 * get fentry/fexit programs on the functions the tracepoints sit in, reading
 * the same values at the same point (fn_* below; the loader takes them only
 * where the tracepoint is absent and an fentry probe attaches). Kernels
 * without bpf_loop (5.10) get this file compiled with RA_NO_BPF_LOOP
 * (readahead_noloop.bpf.c, a second object): bounded loops of at most
 * RA_LOOP_MAX pages.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "twins.bpf.h"
#include "hist.bpf.h"
#include "ra.h"
#define IOS_STATS_SIZE RA_NR_STATS
#include "common.bpf.h"
#include "comms.bpf.h"
#include "fname.bpf.h"

#ifdef RA_NO_BPF_LOOP
/* a bounded loop: the verifier walks every iteration, so keep it short */
#define RA_LOOP_MAX 32
#define MAX_FOLIO_PAGES RA_LOOP_MAX
#define MAX_READ_PAGES RA_LOOP_MAX
#define ra_loop(n, fn, ctx)                                       \
	do {                                                      \
		for (__u32 __i = 0; __i < RA_LOOP_MAX && __i < (n); __i++) \
			fn(__i, ctx);                             \
	} while (0)
#else
#define MAX_FOLIO_PAGES 512  /* order 9: 2 MiB folios */
#define MAX_READ_PAGES 4096  /* pages of one read range walked (16 MiB) */
#define ra_loop(n, fn, ctx) bpf_loop(n, fn, ctx, 0)
#endif

const volatile __u32 targ_tgid = 0;

/* LRU: entries of threads that exited make room for new ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* thread id */
	__type(value, struct ra_task);
} tasks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ra_key);
	__type(value, struct ra_stats);
} files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ra_file);
	__type(value, __s64); /* tracked pages of the file */
} live SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ra_page_key);
	__type(value, struct ra_page);
} pages SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RA_NR_HISTS);
	__type(key, __u32);
	__type(value, struct hist);
} hists SEC(".maps");

/* The block devices read through their own page cache (file key -> the device's dev_t). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct ra_file);
	__type(value, __u32);
} bdevs SEC(".maps");

/* Each other file's name, taken when its first window is seen. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ra_file);
	__type(value, struct agg_file);
} names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct agg_file);
} name_scratch SEC(".maps");

static struct ra_stats zero_stats;
/* s_dev of the block devices' pseudo file system, once a block device's page cache was seen. */
__u32 bdevfs_dev = 0;
/* Pages tracked right now, all files: reads return at once while it is 0. */
__s64 tracked_total = 0;

/*
 * A global (separately verified) function: inside the bpf_loop callbacks an
 * inlined hist_add makes the verifier's state history too long to converge.
 */
__noinline int hist_at(__u32 idx, __u64 v)
{
	struct hist *h = bpf_map_lookup_elem(&hists, &idx);

	if (h)
		hist_add(h, v);
	return 0;
}

static __always_inline bool wanted(__u32 dev)
{
	if (targ_tgid && (bpf_get_current_pid_tgid() >> 32) != targ_tgid)
		return false;
	if (targ_filter_dev && !bpf_map_lookup_elem(&dev_filter, &dev))
		return false;
	return true;
}

#define RA_S_IFMT 0170000
#define RA_S_IFBLK 0060000

/* The disk of a block device's own page cache (its i_rdev), 0 for a file's. */
static __always_inline __u32 block_dev(struct inode *inode)
{
	if ((BPF_CORE_READ(inode, i_mode) & RA_S_IFMT) != RA_S_IFBLK)
		return 0;
	return BPF_CORE_READ(inode, i_rdev);
}

/* Once per file (a hash lookup after that): note a block device's key in bdevs, or the file's
 * name in names. Inlined: a tp_btf program's inode cannot be passed to a global function. */
static __always_inline void note_file(struct inode *inode, __u32 dev, __u64 ino, __u32 rdev)
{
	struct ra_file key = { .ino = ino, .dev = dev };
	struct agg_file *f;
	__u32 zero = 0;

	if (rdev) {
		if (bdevfs_dev != dev)
			bdevfs_dev = dev;
		/* a failure loses only the device's name (its key is shown instead); counted in map_errs */
		map_update(&bdevs, &key, &rdev, BPF_ANY);
		return;
	}
	if (bpf_map_lookup_elem(&names, &key))
		return;
	f = bpf_map_lookup_elem(&name_scratch, &zero);
	if (!f)
		return;
	fname_fill(f, inode);
	/* full: user space names the file without it (its fd table, else mount point and inode);
	 * counted in map_errs (another CPU's create of the same key is expected, not counted) */
	map_update(&names, &key, f, BPF_NOEXIST);
}

static __always_inline struct ra_stats *file_stats(__u32 dev, __u64 ino, __u32 tgid, bool create)
{
	struct ra_key key = { .ino = ino, .dev = dev, .tgid = tgid };
	struct ra_stats *s;

	s = bpf_map_lookup_elem(&files, &key);
	if (s || !create)
		return s;
	/* a new (file, process): name the process, when it is the one doing this */
	s = map_init(&files, &key, &zero_stats);
	if (!s) {
		stat_inc(RA_LOST_FILE_FULL);
		return NULL;
	}
	if (tgid == bpf_get_current_pid_tgid() >> 32)
		comms_note(tgid);
	return s;
}

static __always_inline struct ra_task *task_state(bool create)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct ra_task *t, zero = {};

	if (!create)
		return bpf_map_lookup_elem(&tasks, &tid);
	t = lookup_or_init(&tasks, &tid, &zero);
	if (!t)
		stat_inc(RA_LOST_TASK_FULL);
	return t;
}

static __always_inline void atomic_max(__u64 *p, __u64 v)
{
	if (v > *p)
		*p = v;
}

/* page_cache_sync_ra / page_cache_async_ra */
static __always_inline int on_decision(struct inode *inode, struct file_ra_state *ra, __u64 req_count, __u8 kind)
{
	__u32 dev = BPF_CORE_READ(inode, i_sb, s_dev);
	__u64 ino = BPF_CORE_READ(inode, i_ino);
	__u32 ra_pages = BPF_CORE_READ(ra, ra_pages);
	__u32 rdev = block_dev(inode);
	struct ra_stats *s;
	struct ra_task *t;

	if (!wanted(rdev ? rdev : dev))
		return 0;
	note_file(inode, dev, ino, rdev);
	s = file_stats(dev, ino, bpf_get_current_pid_tgid() >> 32, true);
	if (s) {
		if (kind < RA_NR_KINDS)
			__sync_fetch_and_add(&s->decisions[kind], 1);
		atomic_max(&s->max_ra_pages, ra_pages);
	}
	hist_at(kind * RA_H_PER_KIND + RA_H_RA_PAGES, ra_pages);
	if (kind == RA_KIND_SYNC)
		hist_at(RA_H_REQ, req_count);
	t = task_state(true);
	if (!t)
		return 0;
	t->dev = dev;
	t->ino = ino;
	t->pending = 1;
	t->kind = kind;
	t->has_win = 0;
	return 0;
}

/* A window [start, start + size) of which async_size pages are lookahead. */
static __always_inline int on_window(struct inode *inode, __u64 start, __u64 size, __u64 async_size,
				     __u32 ra_pages)
{
	__u32 dev = BPF_CORE_READ(inode, i_sb, s_dev);
	__u64 ino = BPF_CORE_READ(inode, i_ino);
	__u32 rdev = block_dev(inode);
	struct ra_stats *s;
	struct ra_task *t;
	__u8 kind;

	if (!wanted(rdev ? rdev : dev))
		return 0;
	note_file(inode, dev, ino, rdev);
	t = task_state(true);
	if (!t)
		return 0;
	if (t->has_win && t->dev == dev && t->ino == ino && start < t->win_end + size && start + size > t->win_start) {
		/* the fallback of ra_order to ra_unbounded: the same window, maybe wider */
		if (start < t->win_start)
			t->win_start = start;
		if (start + size > t->win_end)
			t->win_end = start + size;
		return 0;
	}
	kind = (t->pending && t->dev == dev && t->ino == ino) ? t->kind : RA_KIND_OTHER;
	if (kind >= RA_NR_KINDS)
		kind = RA_KIND_OTHER;
	t->pending = 0;
	t->dev = dev;
	t->ino = ino;
	t->win_start = start;
	t->win_end = start + size;
	t->has_win = 1;
	hist_at(kind * RA_H_PER_KIND + RA_H_SIZE, size);
	hist_at(kind * RA_H_PER_KIND + RA_H_ASYNC, async_size);
	/* decisions recorded ra_pages already; page_cache_ra_order shows it for the others */
	if (kind == RA_KIND_OTHER && ra_pages)
		hist_at(RA_KIND_OTHER * RA_H_PER_KIND + RA_H_RA_PAGES, ra_pages);
	s = file_stats(dev, ino, bpf_get_current_pid_tgid() >> 32, true);
	if (s) {
		if (kind == RA_KIND_OTHER) {
			__sync_fetch_and_add(&s->decisions[RA_KIND_OTHER], 1);
			atomic_max(&s->max_ra_pages, ra_pages);
		}
		/* constant offsets, no index: 5.10's verifier loses a spilled index's bounds (and, on
		 * the branch it cannot rule out, reaches umin > umax) */
		if (kind == RA_KIND_SYNC)
			__sync_fetch_and_add(&s->window_pages[RA_KIND_SYNC], size);
		else if (kind == RA_KIND_ASYNC)
			__sync_fetch_and_add(&s->window_pages[RA_KIND_ASYNC], size);
		else
			__sync_fetch_and_add(&s->window_pages[RA_KIND_OTHER], size);
		atomic_max(&s->max_window, size);
	}
	return 0;
}

/*
 * bpf_loop callbacks keep no counters of their own: an exact counter on the
 * stack makes every iteration a new verifier state. They add to map values
 * through pointers looked up beforehand instead.
 */
static __always_inline __s64 *live_counter(__u32 dev, __u64 ino, bool create)
{
	struct ra_file f = { .ino = ino, .dev = dev };
	__s64 zero = 0;

	if (!create)
		return bpf_map_lookup_elem(&live, &f);
	return lookup_or_init(&live, &f, &zero);
}

struct add_ctx {
	struct ra_page_key key;
	struct ra_page val;
	__s64 *live;
	struct ra_stats *stats;
};

static long add_one(__u64 i, void *data)
{
	struct add_ctx *c = data;

	if (map_update(&pages, &c->key, &c->val, BPF_ANY)) {
		stat_inc(RA_LOST_PAGE_FULL);
		if (c->stats)
			__sync_fetch_and_add(&c->stats->untracked, 1);
	} else {
		__sync_fetch_and_add(&tracked_total, 1);
		if (c->live)
			__sync_fetch_and_add(c->live, 1);
	}
	c->key.index++;
	return 0;
}

static __always_inline int on_add(__u32 dev, __u64 ino, __u64 index, __u32 order)
{
	struct ra_task *t = task_state(false);
	struct add_ctx c = {};
	__u32 tgid, n;

	if (!t || !t->has_win || t->dev != dev || t->ino != ino || index < t->win_start || index >= t->win_end)
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	n = order < 10 ? 1u << order : MAX_FOLIO_PAGES;
	if (n > MAX_FOLIO_PAGES)
		n = MAX_FOLIO_PAGES;
	c.key.ino = ino;
	c.key.dev = dev;
	c.key.index = index;
	c.val.added_ns = bpf_ktime_get_ns();
	c.val.tgid = tgid;
	c.stats = file_stats(dev, ino, tgid, true);
	c.live = live_counter(dev, ino, true);
	if (c.stats)
		__sync_fetch_and_add(&c.stats->pages, n);
	ra_loop(n, add_one, &c);
	return 0;
}

struct seen_ctx {
	struct ra_page_key key;
	__u64 now;
	__s64 *live;
	bool used; /* true: a read asked for it; false: it left the cache */
};

static long seen_one(__u64 i, void *data)
{
	struct seen_ctx *c = data;
	struct ra_page *p = bpf_map_lookup_elem(&pages, &c->key);

	if (p) {
		struct ra_stats *s = file_stats(c->key.dev, c->key.ino, p->tgid, false);
		__u64 added = p->added_ns;

		/* count only what this CPU removed: a racing CPU may remove it first */
		if (map_delete(&pages, &c->key, true) == 0) {
			__sync_fetch_and_add(&tracked_total, -1);
			if (c->live)
				__sync_fetch_and_add(c->live, -1);
			if (s) {
				if (c->used)
					__sync_fetch_and_add(&s->used, 1);
				else
					__sync_fetch_and_add(&s->wasted, 1);
			}
			if (c->used)
				hist_at(RA_H_AGE, c->now - added);
		}
	}
	c->key.index++;
	return 0;
}

static __always_inline void pages_seen(__u32 dev, __u64 ino, __u64 first, __u64 last, bool used)
{
	struct seen_ctx c = {};
	__s64 *n = live_counter(dev, ino, false);
	__u64 count;

	if (tracked_total <= 0 || !n || *n <= 0)
		return;
	if (last < first)
		return;
	count = last - first + 1;
	if (count > MAX_READ_PAGES) {
		count = MAX_READ_PAGES;
		stat_inc(RA_LOST_RANGE);
	}
	c.key.ino = ino;
	c.key.dev = dev;
	c.key.index = first;
	c.now = bpf_ktime_get_ns();
	c.live = n;
	c.used = used;
	ra_loop(count, seen_one, &c);
}

/* Called for every buffered read: keep the common case (a file with no
 * tracked pages) to a few loads and one hash lookup. */
static __always_inline int on_get_pages(struct address_space *mapping, __u64 index, __u64 last, const bool btf)
{
	struct inode *host;
	struct ra_task *t;
	__u64 ino;
	__u32 dev;
	__s64 *n;

	if (tracked_total <= 0)
		return 0;
	host = IOS_READ(btf, mapping, host);
	dev = IOS_READ(btf, host, i_sb, s_dev);
	ino = IOS_READ(btf, host, i_ino);
	n = live_counter(dev, ino, false);
	if (!n || *n <= 0)
		return 0;
	pages_seen(dev, ino, index, last, true);
	/* the read is past its readahead: later page additions are not readahead */
	t = task_state(false);
	if (t && t->has_win && t->dev == dev && t->ino == ino)
		t->has_win = 0;
	return 0;
}

/* A page fault on a mapped file asks for one page. */
static __always_inline int on_fault(struct address_space *mapping, __u64 index)
{
	struct inode *host = BPF_CORE_READ(mapping, host);

	pages_seen(BPF_CORE_READ(host, i_sb, s_dev), BPF_CORE_READ(host, i_ino), index, index, true);
	return 0;
}

/* Fault-around mapped cached pages [start, last] into a process. */
static __always_inline int on_map_pages(struct address_space *mapping, __u64 start, __u64 last)
{
	struct inode *host = BPF_CORE_READ(mapping, host);

	pages_seen(BPF_CORE_READ(host, i_sb, s_dev), BPF_CORE_READ(host, i_ino), start, last, true);
	return 0;
}

/* --- tracepoint programs ------------------------------------------------- */

IOS_TP(sync_ra, page_cache_sync_ra, on_decision(inode, ra, req_count, RA_KIND_SYNC), struct inode *inode,
       unsigned long index, struct file_ra_state *ra, unsigned long req_count)
IOS_TP(async_ra, page_cache_async_ra, on_decision(inode, ra, req_count, RA_KIND_ASYNC), struct inode *inode,
       unsigned long index, struct file_ra_state *ra, unsigned long req_count)
IOS_TP(ra_order, page_cache_ra_order,
       on_window(inode, index, BPF_CORE_READ(ra, size), BPF_CORE_READ(ra, async_size), BPF_CORE_READ(ra, ra_pages)),
       struct inode *inode, unsigned long index, struct file_ra_state *ra)
IOS_TP(ra_unbounded, page_cache_ra_unbounded, on_window(inode, index, nr_to_read, lookahead_size, 0),
       struct inode *inode, unsigned long index, unsigned long nr_to_read, unsigned long lookahead_size)
IOS_TP(get_pages, mm_filemap_get_pages, on_get_pages(mapping, index, last_index, btf), struct address_space *mapping,
       unsigned long index, unsigned long last_index)
IOS_TP(fault, mm_filemap_fault, on_fault(mapping, index), struct address_space *mapping, unsigned long index)
IOS_TP(map_pages, mm_filemap_map_pages, on_map_pages(mapping, start, last), struct address_space *mapping,
       unsigned long start, unsigned long last)

/* --- fentry/fexit programs: kernels without the tracepoints ------------------
 * Each reads what its tracepoint passes, where the tracepoint would fire.
 * Where a function's arguments changed between kernels there is one program
 * per signature (fn_<hook>__<alt>); the collector picks the one that matches
 * the function's BTF prototype in the running kernel.
 */

/* 4 KiB pages (PAGE_SHIFT 12 on x86-64 and on arm64's default 4K kernels) */
#define RA_PAGE_SHIFT 12

/* struct page as 5.10 has it (later kernels renamed index inside their folio work) */
struct page___ra {
	struct address_space *mapping;
	unsigned long index;
} __attribute__((preserve_access_index));

static __always_inline struct file_ra_state *ractl_ra(struct readahead_control *ractl)
{
	if (bpf_core_field_exists(ractl->ra))
		return BPF_CORE_READ(ractl, ra);
	return NULL;
}

static __always_inline int fn_decision(struct readahead_control *ractl, struct file_ra_state *ra, __u64 req,
				       __u8 kind)
{
	if (!ra)
		return 0;
	return on_decision(BPF_CORE_READ(ractl, mapping, host), ra, req, kind);
}

/* page_cache_sync_ra(ractl, req_count): at entry, like the tracepoint */
SEC("fentry/page_cache_sync_ra")
int BPF_PROG(fn_sync_ra, struct readahead_control *ractl, unsigned long req_count)
{
	return fn_decision(ractl, ractl_ra(ractl), req_count, RA_KIND_SYNC);
}

/* 5.10: page_cache_sync_ra(ractl, ra, req_count) */
SEC("fentry/page_cache_sync_ra")
int BPF_PROG(fn_sync_ra__ra, struct readahead_control *ractl, struct file_ra_state *ra, unsigned long req_count)
{
	return fn_decision(ractl, ra, req_count, RA_KIND_SYNC);
}

/* The async tracepoint fires after the kernel's own early returns (no readahead, folio under
 * writeback): so do these. A folio's flags are a page's: the first word of both. */
static __always_inline int fn_async(struct readahead_control *ractl, struct file_ra_state *ra, void *pg,
				    __u64 req)
{
	unsigned long flags = 0;

	if (!ra || !BPF_CORE_READ(ra, ra_pages))
		return 0;
	bpf_probe_read_kernel(&flags, sizeof(flags), pg);
	if (flags & (1ull << bpf_core_enum_value(enum pageflags, PG_writeback)))
		return 0;
	return on_decision(BPF_CORE_READ(ractl, mapping, host), ra, req, RA_KIND_ASYNC);
}

/* page_cache_async_ra(ractl, folio, req_count) */
SEC("fentry/page_cache_async_ra")
int BPF_PROG(fn_async_ra, struct readahead_control *ractl, void *folio, unsigned long req_count)
{
	return fn_async(ractl, ractl_ra(ractl), folio, req_count);
}

/* 5.10: page_cache_async_ra(ractl, ra, page, req_count) */
SEC("fentry/page_cache_async_ra")
int BPF_PROG(fn_async_ra__ra, struct readahead_control *ractl, struct file_ra_state *ra, void *page,
	     unsigned long req_count)
{
	return fn_async(ractl, ra, page, req_count);
}

SEC("fentry/page_cache_ra_order")
int BPF_PROG(fn_ra_order, struct readahead_control *ractl, struct file_ra_state *ra)
{
	return on_window(BPF_CORE_READ(ractl, mapping, host), BPF_CORE_READ(ractl, _index), BPF_CORE_READ(ra, size),
			 BPF_CORE_READ(ra, async_size), BPF_CORE_READ(ra, ra_pages));
}

SEC("fentry/page_cache_ra_unbounded")
int BPF_PROG(fn_ra_unbounded, struct readahead_control *ractl, unsigned long nr_to_read,
	     unsigned long lookahead_size)
{
	return on_window(BPF_CORE_READ(ractl, mapping, host), BPF_CORE_READ(ractl, _index), nr_to_read,
			 lookahead_size, 0);
}

/* filemap_get_pages returned 0, where mm_filemap_get_pages fires, with the read's page range */
static __always_inline int fn_read_range(struct kiocb *iocb, __u64 count, int ret)
{
	__u64 pos;

	if (tracked_total <= 0 || ret || !count)
		return 0;
	pos = BPF_CORE_READ(iocb, ki_pos);
	return on_get_pages(BPF_CORE_READ(iocb, ki_filp, f_mapping), pos >> RA_PAGE_SHIFT,
			    ((pos + count + (1 << RA_PAGE_SHIFT) - 1) >> RA_PAGE_SHIFT) - 1, false);
}

/* 6.1: filemap_get_pages(iocb, iter, fbatch) */
SEC("fexit/filemap_get_pages")
int BPF_PROG(fn_get_pages, struct kiocb *iocb, struct iov_iter *iter, void *fbatch, int ret)
{
	return fn_read_range(iocb, BPF_CORE_READ(iter, count), ret);
}

/* later: filemap_get_pages(iocb, count, fbatch, need_uptodate) */
SEC("fexit/filemap_get_pages")
int BPF_PROG(fn_get_pages__count, struct kiocb *iocb, size_t count, void *fbatch, bool need_uptodate, int ret)
{
	return fn_read_range(iocb, count, ret);
}

/* Kernels whose buffered read has no filemap_get_pages (5.10's generic_file_buffered_read): a read
 * marks each page it copies accessed, the first time it touches it. */
SEC("fentry/mark_page_accessed")
int BPF_PROG(fn_get_pages__accessed, struct page___ra *page)
{
	struct address_space *mapping;
	__u64 index;

	if (tracked_total <= 0)
		return 0;
	mapping = BPF_CORE_READ(page, mapping);
	if (!mapping || ((unsigned long)mapping & 3)) /* anonymous or movable: no file */
		return 0;
	index = BPF_CORE_READ(page, index);
	return on_get_pages(mapping, index, index, false);
}

SEC("fentry/filemap_fault")
int BPF_PROG(fn_fault, struct vm_fault *vmf)
{
	return on_fault(BPF_CORE_READ(vmf, vma, vm_file, f_mapping), BPF_CORE_READ(vmf, pgoff));
}

SEC("fentry/filemap_map_pages")
int BPF_PROG(fn_map_pages, struct vm_fault *vmf, unsigned long start, unsigned long last)
{
	return on_map_pages(BPF_CORE_READ(vmf, vma, vm_file, f_mapping), start, last);
}

/* The folio's order; 0 on kernels whose event has no order field (5.10: pages only) */
static __always_inline __u32 folio_order(struct trace_event_raw_mm_filemap_op_page_cache *ctx)
{
	if (bpf_core_field_exists(ctx->order))
		return ctx->order;
	return 0;
}

/*
 * Folio add/delete: the classic tracepoints carry the inode number, device,
 * index and order already decoded, which spares a CO-RE walk through struct
 * folio (whose order encoding changed repeatedly); these run once per folio
 * entering or leaving the page cache, not per read.
 */
SEC("tracepoint/filemap/mm_filemap_add_to_page_cache")
int tp_add_page(struct trace_event_raw_mm_filemap_op_page_cache *ctx)
{
	__u32 dev = ctx->s_dev;

	/* a block device's page cache is filtered on its disk by the window's program; on_add
	 * takes only pages of the thread's current window */
	if (targ_filter_dev && !bpf_map_lookup_elem(&dev_filter, &dev) && !(bdevfs_dev && dev == bdevfs_dev))
		return 0;
	return on_add(dev, ctx->i_ino, ctx->index, folio_order(ctx));
}

SEC("tracepoint/filemap/mm_filemap_delete_from_page_cache")
int tp_delete_page(struct trace_event_raw_mm_filemap_op_page_cache *ctx)
{
	__u32 order = folio_order(ctx);
	__u64 n = order < 10 ? 1ull << order : MAX_FOLIO_PAGES;

	pages_seen(ctx->s_dev, ctx->i_ino, ctx->index, ctx->index + n - 1, false);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

COMMS_RENAME_PROGRAMS
