/*
 * ioscope.trace._tracecore: the two sequential loops of the offline tools, in C.
 *
 * 1. scan_blktrace/gather_blktrace: find the records of a blktrace stream
 *    (each record's length depends on the one before it) and copy their
 *    fixed part and first payload bytes into a regular array for numpy.
 * 2. Core: the pairing part of btt's analysis.
 *
 * Pairing Q/G/I/M/D/C events is inherently sequential (each event changes
 * which I/Os are in flight), so it runs here, one pass over each chunk of
 * events; everything else (statistics, histograms, percentiles, seeks,
 * active periods) is done with numpy in btt.py from the records this emits.
 *
 * Rules (see btt.py for the list): in-flight Qs per device are kept sorted
 * by start sector, one per start sector; G/I/M/S apply to the Q whose range
 * holds their sector; D and C to every Q whose range lies inside theirs.
 *
 * Input per chunk: parallel arrays ts u64, act u16, dev i32 (dense index),
 * sector u64, bytes u32, proc i32 (dense index), rd u8, aux u64, auxdev i32.
 * Output: bytes of rec_t records, one bytes object per kind; per-device
 * counters via devices().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT64_MAX

enum {
	K_Q2Q, K_Q2A, K_Q2G, K_S2G, K_G2I, K_Q2M, K_I2D, K_M2D, K_D2C, K_Q2C, K_Q2D,
	K_Q2Q_DM, K_Q2A_DM, K_Q2C_DM,
	K_SEEK_Q, K_SEEK_D, K_LIVE, K_NKINDS
};

enum {  /* blktrace action codes */
	A_QUEUE = 1, A_BACKMERGE, A_FRONTMERGE, A_GETRQ, A_SLEEPRQ, A_REQUEUE, A_ISSUE, A_COMPLETE,
	A_PLUG, A_UNPLUG_IO, A_UNPLUG_TIMER, A_INSERT, A_SPLIT, A_BOUNCE, A_REMAP
};

/* btt's BIT_TIME(): ns -> seconds as a double, whole seconds and the rest converted apart */
static inline double bit_time(uint64_t t)
{
	return (double)(t / 1000000000ULL) + (double)(t % 1000000000ULL) / 1.0e9;
}

typedef struct {
	int32_t kind, dev, proc, rd;
	uint64_t t, v, sector;
} rec_t;

typedef struct {
	uint64_t t, s, e, g, i, m, d, sl;
	int32_t proc, rd, split;  /* split: the bio was split (this is it or one of its pieces) */
	uint32_t rq;              /* requeues (R events in its range) */
	uint64_t ord;             /* ordinal of its Q event among all events fed */
} qrec_t;

/*
 * One I/O's life, for the per-I/O table (set_io_records): emitted when the I/O completes, when a
 * newer Q at its start sector replaces it (IO_DUP), at io_flush() for those still in flight
 * (IO_END), and for a completion that finishes no tracked I/O (IO_START: queued before the
 * capture began; only c, ord_c, s and e are set). Times are NONE where the I/O had no such event.
 */
enum { IO_SPLIT = 1, IO_DUP = 2, IO_END = 4, IO_START = 8 };
typedef struct {
	uint64_t ord_q, ord_c, t, g, i, m, d, c, s, e;
	int32_t dev, proc;
	uint32_t rq, flags;
} iorec_t;

/*
 * btt's view of the same events, kept beside ioscope's pairing so that report can say exactly
 * which I/Os btt pairs differently. btt keeps the Qs in flight in a red-black tree per disk
 * keyed by start sector (Linux's classic rbtree: textbook insertion and deletion, the successor
 * taking a deleted node's place) and looks events up by descending it: a G, I, M or S goes to
 * the first Q met whose range holds its sector; a D or C to the Qs inside its range that the
 * descent reaches (it turns back at a Q that covers the range's end on that side). When Qs
 * overlap (a split bio btt never completes, and the later I/Os inside its range) which one is
 * met depends on the tree's shape, so the shape is rebuilt here as btt builds it.
 */
typedef struct {
	uint64_t t, s, e, d;
	int32_t l, r, p;
	int32_t red;
} bnode_t;


/*
 * Seek distances, kept as btt keeps them: a red-black tree of distinct |distance| with a count
 * each, built by the classic insertion algorithm (the one Linux's rbtree uses, which btt uses).
 * btt's MEDIAN and MODE columns depend on the tree's shape: its median is the first node, in
 * pre-order, whose own count reaches half the seeks; its modes are the most frequent
 * distances in post-order. The true median is reported as well.
 */
/*
 * 20 bytes a node (a random workload has one node per seek): no parent index, the insertion
 * keeps the path from the root instead; the colour shares a word with the right index.
 */
typedef struct __attribute__((packed, aligned(4))) {
	int64_t key;
	uint32_t cnt;
	int32_t left;
	int32_t right : 31;
	uint32_t red : 1;
} snode_t;

_Static_assert(sizeof(snode_t) == 20, "seek tree node size");
#define ST_MAX_NODES ((1 << 30) - 1)   /* what right:31 indexes */
#define ST_MAX_DEPTH 96                /* a red-black tree of < 2^30 nodes is < 60 deep */

typedef struct {
	snode_t *n;
	int32_t nn, cap, root;
	int64_t last_start, last_end;
	uint64_t nseeks;
	double total;
} stree_t;

/* rotations; px is x's parent (-1: x is the root) */
static void st_rotate_left(stree_t *t, int32_t x, int32_t px)
{
	snode_t *n = t->n;
	int32_t y = n[x].right;
	n[x].right = n[y].left;
	n[y].left = x;
	if (px < 0)
		t->root = y;
	else if (n[px].left == x)
		n[px].left = y;
	else
		n[px].right = y;
}

static void st_rotate_right(stree_t *t, int32_t x, int32_t px)
{
	snode_t *n = t->n;
	int32_t y = n[x].left;
	n[x].left = n[y].right;
	n[y].right = x;
	if (px < 0)
		t->root = y;
	else if (n[px].right == x)
		n[px].right = y;
	else
		n[px].left = y;
}

/* The classic insertion and fix-up (same recolourings and rotations, so the same tree shape) */
static int st_insert(stree_t *t, int64_t key)
{
	int32_t path[ST_MAX_DEPTH];
	int d = -1;
	int32_t cur = t->root;
	int go_left = 0;
	while (cur >= 0) {
		if (d + 2 >= ST_MAX_DEPTH)
			return -1;
		path[++d] = cur;
		if (key < t->n[cur].key) {
			cur = t->n[cur].left;
			go_left = 1;
		} else if (key > t->n[cur].key) {
			cur = t->n[cur].right;
			go_left = 0;
		} else {
			t->n[cur].cnt++;
			return 0;
		}
	}
	if (t->nn == t->cap) {
		if (t->cap >= ST_MAX_NODES)
			return -1;
		int32_t cap = t->cap ? (t->cap > ST_MAX_NODES / 2 ? ST_MAX_NODES : t->cap * 2) : 256;
		snode_t *nn = realloc(t->n, (size_t)cap * sizeof(*nn));
		if (!nn)
			return -1;
		t->n = nn;
		t->cap = cap;
	}
	int32_t z = t->nn++;
	snode_t *n = t->n;
	n[z].key = key;
	n[z].cnt = 1;
	n[z].left = n[z].right = -1;
	n[z].red = 1;
	if (d < 0)
		t->root = z;
	else if (go_left)
		n[path[d]].left = z;
	else
		n[path[d]].right = z;
	path[++d] = z;
	/* fix-up: path[d] is z, path[d - 1] its parent; a red parent is never the root, so d >= 2 */
	while (d >= 2 && n[path[d - 1]].red) {
		int32_t p = path[d - 1], g = path[d - 2], gg = d >= 3 ? path[d - 3] : -1;
		z = path[d];
		if (p == n[g].left) {
			int32_t u = n[g].right;
			if (u >= 0 && n[u].red) {
				n[p].red = 0;
				n[u].red = 0;
				n[g].red = 1;
				d -= 2;
				continue;
			}
			if (z == n[p].right) {
				st_rotate_left(t, p, g);
				p = z;
			}
			n[p].red = 0;
			n[g].red = 1;
			st_rotate_right(t, g, gg);
		} else {
			int32_t u = n[g].left;
			if (u >= 0 && n[u].red) {
				n[p].red = 0;
				n[u].red = 0;
				n[g].red = 1;
				d -= 2;
				continue;
			}
			if (z == n[p].left) {
				st_rotate_right(t, p, g);
				p = z;
			}
			n[p].red = 0;
			n[g].red = 1;
			st_rotate_left(t, g, gg);
		}
		break;   /* p is black now: done */
	}
	n[t->root].red = 0;
	return 0;
}

static int64_t st_dist(stree_t *t, int64_t s, int64_t e)
{
	int64_t dist;
	if ((t->last_start <= s && s <= t->last_end) || (t->last_start <= e && e <= t->last_end))
		dist = 0;
	else if (s > t->last_end)
		dist = s - t->last_end;
	else
		dist = s - t->last_start;
	t->last_start = s;
	t->last_end = e;
	if (dist < 0)
		dist = -dist;
	t->nseeks++;
	t->total += (double)dist;
	return dist;
}

/* btt's median: the first node in pre-order whose own count reaches the target */
static int st_btt_median(const stree_t *t, int32_t x, int64_t target, int64_t *out)
{
	if (x < 0)
		return 0;
	if (t->n[x].cnt >= target) {
		*out = t->n[x].key;
		return 1;
	}
	return st_btt_median(t, t->n[x].left, target, out) || st_btt_median(t, t->n[x].right, target, out);
}

static void st_inorder_median(const stree_t *t, int32_t x, uint64_t half, uint64_t *seen, int64_t *out, int *done)
{
	if (x < 0 || *done)
		return;
	st_inorder_median(t, t->n[x].left, half, seen, out, done);
	if (*done)
		return;
	*seen += (uint64_t)t->n[x].cnt;
	if (*seen * 2 >= half) {
		*out = t->n[x].key;
		*done = 1;
		return;
	}
	st_inorder_median(t, t->n[x].right, half, seen, out, done);
}

/* btt's modes: post-order, the most frequent distances; the first MAX_MODES are kept, all counted */
#define MAX_MODES 16
typedef struct {
	int64_t keys[MAX_MODES];
	int64_t most;
	uint64_t nmodes;
	int first;
} modes_t;

static void st_modes(const stree_t *t, int32_t x, modes_t *m)
{
	if (x < 0)
		return;
	st_modes(t, t->n[x].left, m);
	st_modes(t, t->n[x].right, m);
	const snode_t *n = &t->n[x];
	if (m->first || n->cnt > m->most) {
		m->first = 0;
		m->nmodes = 0;
		m->most = n->cnt;
	} else if (n->cnt < m->most) {
		return;
	}
	if (m->nmodes < MAX_MODES)
		m->keys[m->nmodes] = n->key;
	m->nmodes++;
}

static PyObject *st_export(const stree_t *t)
{
	int64_t bm = 0, tm = 0, most = 0;
	int first = 1, done = 0;
	uint64_t seen = 0;
	if (t->root >= 0) {
		st_btt_median(t, t->root, (int64_t)(t->nseeks / 2), &bm);
		st_inorder_median(t, t->root, t->nseeks, &seen, &tm, &done);
	}
	modes_t m = {.first = 1};
	if (t->root >= 0)
		st_modes(t, t->root, &m);
	most = m.most;
	(void)first;
	uint64_t keep = m.nmodes < MAX_MODES ? m.nmodes : MAX_MODES;
	PyObject *modes = PyList_New((Py_ssize_t)keep);
	if (!modes)
		return NULL;
	for (uint64_t i = 0; i < keep; i++)
		PyList_SET_ITEM(modes, (Py_ssize_t)i, PyLong_FromLongLong(m.keys[i]));
	return Py_BuildValue("{s:K,s:d,s:L,s:L,s:N,s:K,s:L,s:i}", "n", (unsigned long long)t->nseeks, "total", t->total,
			     "btt_median", (long long)bm, "median", (long long)tm, "modes", modes,
			     "nmodes", (unsigned long long)m.nmodes, "most", (long long)most, "distinct", (int)t->nn);
}

typedef struct {
	int alloc, culling, dm;
	uint64_t start_time, end_time;
	qrec_t *q;
	size_t nq, capq;
	uint64_t last_q;
	uint64_t n_qs, n_ds, n_act_q, t_act_q, dup_q, culled, overlap_q;
	/* split bios: pieces made (each paired on its own, with the bio's Q time); the ranges btt
	 * keeps as one I/O no piece completes, and the later Qs inside one (btt may pair them with it) */
	uint64_t split_pieces, split_bios;
	/* btt's view (bnode_t): its tree of Qs, the Q2C and D2C it counts, and the I/Os ioscope
	 * completes that btt does not complete at the same C, by reason: a split bio or piece, an I/O
	 * inside a split bio's range (btt keeps that range in flight for ever), anything else; and
	 * the G events btt gives to an I/O other than their own (same reasons) */
	int32_t broot;
	uint64_t bn_live, btt_q2c_n, btt_d2c_n, btt_diff_split, btt_diff_range, btt_diff_other;
	uint64_t btt_g_split, btt_g_range, btt_g_other;
	uint64_t *stale; /* [start, end) pairs, sorted by start */
	size_t nstale, capstale;
	stree_t seek_q, seek_d;
	int plugged;
	uint64_t last_plug, nplugs, nplugs_t, nios_up, nios_upt;
	double plugged_s; /* as btt keeps it: a sum of differences of BIT_TIME()s, in seconds */
	uint64_t blk_n, blk_total, blk_min, blk_max;
	uint64_t q2d_hist[10];
} dev_t_;

/* a seek distance to insert into tree `tree` (device index * 2 + 0 for Q2Q, 1 for D2D) */
typedef struct {
	int64_t dist;
	int32_t tree;
} seekjob_t;

typedef struct {
	PyObject_HEAD
	dev_t_ *devs;
	size_t ndevs;
	int32_t *order;          /* device indexes in allocation order */
	size_t norder;
	uint64_t *proc_last_q;
	size_t nprocs;
	uint64_t last_q;
	rec_t *out[K_NKINDS];
	size_t nout[K_NKINDS], capout[K_NKINDS];
	int oom;
	/* The seek trees are built by a worker thread while Python works on the chunk's records:
	 * feed() collects the distances in `jobs`, hands them over at its end and waits, at its
	 * start, until the previous batch is in the trees. Two workers: Q2Q trees and D2D trees. */
	seekjob_t *jobs, *work;
	size_t njobs, capjobs, nwork, capwork;
	pthread_t worker[2];     /* one builds the Q2Q trees, the other the D2D trees */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int started, busy, quit, worker_oom;
	uint64_t generation, done[2];
	uint64_t tz;             /* the trace's time zero: plug times are BIT_TIME(t - tz), as btt sees them */
	bnode_t *bn;             /* btt's trees (all disks): nodes, free list through r */
	size_t nbn, capbn;
	int32_t bfree;
	int32_t *bhits;
	size_t nbhits, capbhits;
	int io_on;               /* per-I/O records wanted (set_io_records) */
	int no_seeks;            /* no seek trees (set_seeks(False): only the pairing is wanted) */
	uint64_t nfed;           /* events fed before this chunk: the base of Q and C ordinals */
	iorec_t *io;
	size_t nio, capio;
} Core;

static int32_t bn_alloc(Core *c)
{
	if (c->bfree >= 0) {
		int32_t x = c->bfree;
		c->bfree = c->bn[x].r;
		return x;
	}
	if (c->nbn == c->capbn) {
		size_t cap = c->capbn ? c->capbn * 2 : 256;
		if (cap > INT32_MAX)
			return -1;
		bnode_t *n = realloc(c->bn, cap * sizeof(*n));
		if (!n)
			return -1;
		c->bn = n;
		c->capbn = cap;
	}
	return (int32_t)c->nbn++;
}

static void bn_rotate(Core *c, int32_t *root, int32_t x, int left)
{
	bnode_t *n = c->bn;
	int32_t y = left ? n[x].r : n[x].l;
	if (left) {
		n[x].r = n[y].l;
		if (n[y].l >= 0) n[n[y].l].p = x;
		n[y].l = x;
	} else {
		n[x].l = n[y].r;
		if (n[y].r >= 0) n[n[y].r].p = x;
		n[y].r = x;
	}
	int32_t px = n[x].p;
	n[y].p = px;
	if (px < 0) *root = y;
	else if (n[px].l == x) n[px].l = y;
	else n[px].r = y;
	n[x].p = y;
}

/* insert a Q; a Q at the start sector of one in the tree takes that node's place (btt's newer Q wins) */
static int bn_insert(Core *c, dev_t_ *d, uint64_t t, uint64_t s, uint64_t e)
{
	bnode_t *n = c->bn;
	int32_t p = -1, x = d->broot;
	int left = 0;
	while (x >= 0) {
		p = x;
		if (s < n[x].s) { x = n[x].l; left = 1; }
		else if (s > n[x].s) { x = n[x].r; left = 0; }
		else {
			n[x].t = t; n[x].e = e; n[x].d = NONE;
			return 0;
		}
	}
	int32_t z = bn_alloc(c);
	if (z < 0)
		return -1;
	n = c->bn;
	n[z] = (bnode_t){t, s, e, NONE, -1, -1, p, 1};
	if (p < 0) d->broot = z;
	else if (left) n[p].l = z;
	else n[p].r = z;
	d->bn_live++;
	while (n[z].p >= 0 && n[n[z].p].red) {
		int32_t zp = n[z].p, g = n[zp].p;
		int pl = n[g].l == zp;
		int32_t u = pl ? n[g].r : n[g].l;
		if (u >= 0 && n[u].red) {
			n[zp].red = 0; n[u].red = 0; n[g].red = 1;
			z = g;
			continue;
		}
		if (z == (pl ? n[zp].r : n[zp].l)) {
			z = zp;
			bn_rotate(c, &d->broot, z, pl);
			zp = n[z].p;
		}
		n[zp].red = 0; n[g].red = 1;
		bn_rotate(c, &d->broot, g, !pl);
	}
	n[d->broot].red = 0;
	return 0;
}

static void bn_erase(Core *c, dev_t_ *d, int32_t z)
{
	bnode_t *n = c->bn;
	int32_t child, parent, red;
	if (n[z].l < 0 || n[z].r < 0) {
		child = n[z].l < 0 ? n[z].r : n[z].l;
		parent = n[z].p;
		red = n[z].red;
		if (child >= 0) n[child].p = parent;
		if (parent < 0) d->broot = child;
		else if (n[parent].l == z) n[parent].l = child;
		else n[parent].r = child;
	} else {
		int32_t y = n[z].r;  /* the successor takes z's place and colour */
		while (n[y].l >= 0) y = n[y].l;
		child = n[y].r;
		parent = n[y].p;
		red = n[y].red;
		if (child >= 0) n[child].p = parent;
		if (parent == z) {
			n[parent].r = child;
			parent = y;
		} else {
			n[parent].l = child;
		}
		n[y].p = n[z].p; n[y].red = n[z].red; n[y].l = n[z].l; n[y].r = n[z].r;
		if (n[z].p < 0) d->broot = y;
		else if (n[n[z].p].l == z) n[n[z].p].l = y;
		else n[n[z].p].r = y;
		n[n[z].l].p = y;
		if (n[z].r >= 0) n[n[z].r].p = y;
	}
	if (!red) {
		int32_t x = child;
		while ((x < 0 || !n[x].red) && x != d->broot) {
			int xl = n[parent].l == x;
			int32_t w = xl ? n[parent].r : n[parent].l;
			if (n[w].red) {
				n[w].red = 0; n[parent].red = 1;
				bn_rotate(c, &d->broot, parent, xl);
				w = xl ? n[parent].r : n[parent].l;
			}
			int32_t wn = xl ? n[w].l : n[w].r, wf = xl ? n[w].r : n[w].l;
			if ((wn < 0 || !n[wn].red) && (wf < 0 || !n[wf].red)) {
				n[w].red = 1;
				x = parent;
				parent = n[x].p;
			} else {
				if (wf < 0 || !n[wf].red) {
					n[wn].red = 0; n[w].red = 1;
					bn_rotate(c, &d->broot, w, !xl);
					w = xl ? n[parent].r : n[parent].l;
				}
				n[w].red = n[parent].red; n[parent].red = 0;
				wf = xl ? n[w].r : n[w].l;
				if (wf >= 0) n[wf].red = 0;
				bn_rotate(c, &d->broot, parent, xl);
				x = d->broot;
				break;
			}
		}
		if (x >= 0) n[x].red = 0;
	}
	n[z].r = c->bfree;
	c->bfree = z;
	d->bn_live--;
}

/* btt's lookup of one sector: the first Q met on the way down whose range holds it */
static int32_t bn_find(const Core *c, const dev_t_ *d, uint64_t sec)
{
	int32_t x = d->broot;
	while (x >= 0) {
		if (sec < c->bn[x].s) x = c->bn[x].l;
		else if (sec >= c->bn[x].e) x = c->bn[x].r;
		else return x;
	}
	return -1;
}

/* btt's range walk: the Qs inside [s, e) it reaches, into c->bhits */
static int bn_walk(Core *c, int32_t x, uint64_t s, uint64_t e)
{
	while (x >= 0) {
		bnode_t *n = &c->bn[x];
		if (s <= n->s && n->e <= e) {
			if (c->nbhits == c->capbhits) {
				size_t cap = c->capbhits ? c->capbhits * 2 : 64;
				int32_t *h = realloc(c->bhits, cap * sizeof(*h));
				if (!h)
					return -1;
				c->bhits = h;
				c->capbhits = cap;
			}
			c->bhits[c->nbhits++] = x;
		}
		int goleft = s < n->s, goright = n->e < e;
		if (goleft && goright) {
			if (bn_walk(c, n->l, s, e) < 0)
				return -1;
			x = c->bn[x].r;
		} else if (goleft) {
			x = n->l;
		} else if (goright) {
			x = n->r;
		} else {
			break;
		}
	}
	return 0;
}

static inline uint64_t tdelta(uint64_t from, uint64_t to)
{
	return from < to ? to - from : 1;
}

static void emit(Core *c, int kind, int32_t dev, int32_t proc, uint64_t t, uint64_t v, uint64_t sector, int rd)
{
	if (c->nout[kind] == c->capout[kind]) {
		size_t cap = c->capout[kind] ? c->capout[kind] * 2 : 4096;
		rec_t *n = realloc(c->out[kind], cap * sizeof(*n));
		if (!n) {
			c->oom = 1;
			return;
		}
		c->out[kind] = n;
		c->capout[kind] = cap;
	}
	rec_t *r = &c->out[kind][c->nout[kind]++];
	r->kind = kind;
	r->dev = dev;
	r->proc = proc;
	r->rd = rd;
	r->t = t;
	r->v = v;
	r->sector = sector;
}

static void emit_io(Core *c, const qrec_t *q, int32_t dev, uint64_t ord_c, uint64_t tc, uint32_t flags)
{
	if (c->nio == c->capio) {
		size_t cap = c->capio ? c->capio * 2 : 4096;
		iorec_t *n = realloc(c->io, cap * sizeof(*n));
		if (!n) {
			c->oom = 1;
			return;
		}
		c->io = n;
		c->capio = cap;
	}
	iorec_t *r = &c->io[c->nio++];
	r->ord_q = q->ord;
	r->ord_c = ord_c;
	r->t = q->t;
	r->g = q->g;
	r->i = q->i;
	r->m = q->m;
	r->d = q->d;
	r->c = tc;
	r->s = q->s;
	r->e = q->e;
	r->dev = dev;
	r->proc = q->proc;
	r->rq = q->rq;
	r->flags = flags | (q->split ? IO_SPLIT : 0);
}

/* a completion that finishes no tracked I/O: the I/O was queued before the capture started */
static void emit_io_start(Core *c, int32_t dev, uint64_t ord_c, uint64_t tc, uint64_t s, uint64_t e)
{
	qrec_t q = {.t = NONE, .s = s, .e = e, .g = NONE, .i = NONE, .m = NONE, .d = NONE, .proc = -1, .ord = NONE};
	emit_io(c, &q, dev, ord_c, tc, IO_START);
}

static int ensure_dev(Core *c, size_t idx)
{
	if (idx < c->ndevs)
		return 0;
	size_t n = idx + 8;
	dev_t_ *d = realloc(c->devs, n * sizeof(*d));
	int32_t *o = realloc(c->order, n * sizeof(*o));
	if (!d || !o) {
		if (d) c->devs = d;
		if (o) c->order = o;
		return -1;
	}
	memset(d + c->ndevs, 0, (n - c->ndevs) * sizeof(*d));
	c->devs = d;
	c->order = o;
	c->ndevs = n;
	return 0;
}

static int ensure_proc(Core *c, size_t idx)
{
	if (idx < c->nprocs)
		return 0;
	size_t n = idx + 64;
	uint64_t *p = realloc(c->proc_last_q, n * sizeof(*p));
	if (!p)
		return -1;
	for (size_t i = c->nprocs; i < n; i++)
		p[i] = NONE;
	c->proc_last_q = p;
	c->nprocs = n;
	return 0;
}

/* the device of an event that btt sets up (allocating it on first sight) */
static dev_t_ *setup_dev(Core *c, int32_t idx, uint64_t ts)
{
	dev_t_ *d = &c->devs[idx];
	if (!d->alloc) {
		d->alloc = 1;
		d->culling = 1;
		d->start_time = d->end_time = ts;
		d->last_q = NONE;
		d->seek_q.root = d->seek_d.root = -1;
		d->broot = -1;
		c->order[c->norder++] = idx;
	}
	return d;
}

/* index of the first tracked Q with start >= s */
static size_t lower(const dev_t_ *d, uint64_t s)
{
	size_t lo = 0, hi = d->nq;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (d->q[mid].s < s)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* room for one more in-flight Q; -1 when out of memory */
static int grow_q(dev_t_ *d)
{
	if (d->nq < d->capq)
		return 0;
	size_t cap = d->capq ? d->capq * 2 : 64;
	qrec_t *nq = realloc(d->q, cap * sizeof(*nq));
	if (!nq)
		return -1;
	d->q = nq;
	d->capq = cap;
	return 0;
}

/* Does [s, e) overlap a range btt still holds for a split bio? */
static int in_stale(const dev_t_ *d, uint64_t s, uint64_t e)
{
	size_t lo = 0, hi = d->nstale;
	while (lo < hi) { /* first range starting at or after e */
		size_t mid = (lo + hi) / 2;
		if (d->stale[2 * mid] < e)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* ranges of different bios do not nest: the one before is the only candidate */
	return lo > 0 && d->stale[2 * (lo - 1) + 1] > s;
}

static int add_stale(dev_t_ *d, uint64_t s, uint64_t e)
{
	if (d->nstale == d->capstale) {
		size_t cap = d->capstale ? d->capstale * 2 : 16;
		uint64_t *ns = realloc(d->stale, cap * 2 * sizeof(*ns));
		if (!ns)
			return -1;
		d->stale = ns;
		d->capstale = cap;
	}
	size_t i = d->nstale;
	while (i > 0 && d->stale[2 * (i - 1)] > s) {
		d->stale[2 * i] = d->stale[2 * (i - 1)];
		d->stale[2 * i + 1] = d->stale[2 * (i - 1) + 1];
		i--;
	}
	d->stale[2 * i] = s;
	d->stale[2 * i + 1] = e;
	d->nstale++;
	return 0;
}

static qrec_t *find_sec(dev_t_ *d, uint64_t sec)
{
	size_t i = lower(d, sec + 1);  /* first start > sec */
	if (i == 0)
		return NULL;
	qrec_t *q = &d->q[i - 1];
	return sec < q->e ? q : NULL;
}

static int get_buf(PyObject *obj, Py_buffer *b, Py_ssize_t itemsize, Py_ssize_t n, const char *what)
{
	if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS) < 0)
		return -1;
	if (b->len != itemsize * n) {
		PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes, got %zd", what, itemsize * n, b->len);
		PyBuffer_Release(b);
		return -1;
	}
	return 0;
}


/* ------------------------------------------------------------------ blktrace scanning */

#define BT_MAGIC 0x65617400u
#define BT_VERSION 0x07u

static inline uint32_t rd32(const uint8_t *p, int swap)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return swap ? __builtin_bswap32(v) : v;
}

static inline uint16_t rd16(const uint8_t *p, int swap)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return swap ? __builtin_bswap16(v) : v;
}

/*
 * scan_blktrace(buf, swap, final) -> (offsets: bytes of int64, end, status, bad_offset, bad_value)
 * status: 0 all records complete; 1 the last record is incomplete (needs more data, or the
 * stream was cut when final); 2 bad magic at bad_offset; 3 unsupported version at bad_offset.
 * With status 1, bad_offset is where the incomplete record starts and bad_value is 0 when
 * its 48-byte header is cut, else its payload length.
 */
static PyObject *scan_blktrace(PyObject *self, PyObject *args)
{
	Py_buffer b;
	int swap, final;
	if (!PyArg_ParseTuple(args, "y*pp", &b, &swap, &final))
		return NULL;
	const uint8_t *p = b.buf;
	size_t len = (size_t)b.len, off = 0, n = 0;
	int64_t *offs = malloc((len / 48 + 1) * sizeof(int64_t));
	int status = 0;
	unsigned long long bad_off = 0, bad_val = 0;
	if (!offs) {
		PyBuffer_Release(&b);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	while (off < len) {
		if (len - off < 48) {
			status = 1;
			bad_off = off;
			bad_val = 0;
			break;
		}
		uint32_t magic = rd32(p + off, swap);
		if ((magic & 0xffffff00u) != BT_MAGIC) {
			status = 2;
			bad_off = off;
			bad_val = magic;
			break;
		}
		if ((magic & 0xffu) != BT_VERSION) {
			status = 3;
			bad_off = off;
			bad_val = magic & 0xffu;
			break;
		}
		uint16_t plen = rd16(p + off + 46, swap);
		if (len - off - 48 < plen) {
			status = 1;
			bad_off = off;
			bad_val = plen;
			break;
		}
		offs[n++] = (int64_t)off;
		off += 48 + (size_t)plen;
	}
	Py_END_ALLOW_THREADS
	(void)final;
	PyObject *ob = PyBytes_FromStringAndSize((const char *)offs, (Py_ssize_t)(n * sizeof(int64_t)));
	free(offs);
	PyBuffer_Release(&b);
	if (!ob)
		return NULL;
	return Py_BuildValue("(NKiKK)", ob, (unsigned long long)off, status, bad_off, bad_val);
}

/* gather_blktrace(buf, offsets) -> bytes: 64 per record, the 48-byte header then the first
 * 16 payload bytes (zeros past the payload's end) */
static PyObject *gather_blktrace(PyObject *self, PyObject *args)
{
	Py_buffer b, o;
	int swap;
	if (!PyArg_ParseTuple(args, "y*y*p", &b, &o, &swap))
		return NULL;
	size_t n = (size_t)o.len / sizeof(int64_t);
	const int64_t *offs = o.buf;
	const uint8_t *p = b.buf;
	PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 64));
	if (!out) {
		PyBuffer_Release(&b);
		PyBuffer_Release(&o);
		return NULL;
	}
	uint8_t *q = (uint8_t *)PyBytes_AS_STRING(out);
	int bad = 0;
	Py_BEGIN_ALLOW_THREADS
	for (size_t i = 0; i < n; i++) {
		size_t off = (size_t)offs[i];
		if (off + 48 > (size_t)b.len) {
			bad = 1;
			break;
		}
		uint16_t plen = rd16(p + off + 46, swap);
		size_t avail = (size_t)b.len - off - 48;
		size_t take = plen < 16 ? plen : 16;
		if (take > avail)
			take = avail;
		memcpy(q + i * 64, p + off, 48);
		memcpy(q + i * 64 + 48, p + off + 48, take);
		memset(q + i * 64 + 48 + take, 0, 16 - take);
	}
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);
	PyBuffer_Release(&o);
	if (bad) {
		Py_DECREF(out);
		PyErr_SetString(PyExc_ValueError, "record offset past the end of the buffer");
		return NULL;
	}
	return out;
}


/* ------------------------------------------------------------------ the seek-tree worker */

static int queue_seek(Core *c, int32_t tree, int64_t dist)
{
	if (c->njobs == c->capjobs) {
		size_t cap = c->capjobs ? c->capjobs * 2 : 4096;
		seekjob_t *n = realloc(c->jobs, cap * sizeof(*n));
		if (!n)
			return -1;
		c->jobs = n;
		c->capjobs = cap;
	}
	c->jobs[c->njobs].dist = dist;
	c->jobs[c->njobs].tree = tree;
	c->njobs++;
	return 0;
}

typedef struct {
	Core *c;
	int which;
} worker_arg_t;

static void *seek_worker(void *arg)
{
	Core *c = ((worker_arg_t *)arg)->c;
	int which = ((worker_arg_t *)arg)->which;
	free(arg);
	for (;;) {
		pthread_mutex_lock(&c->mu);
		while (c->done[which] == c->generation && !c->quit)
			pthread_cond_wait(&c->cv, &c->mu);
		if (c->done[which] == c->generation) {
			pthread_mutex_unlock(&c->mu);
			return NULL;
		}
		pthread_mutex_unlock(&c->mu);
		for (size_t i = 0; i < c->nwork; i++) {
			if ((c->work[i].tree & 1) != which)
				continue;
			dev_t_ *d = &c->devs[c->work[i].tree >> 1];
			if (st_insert(which ? &d->seek_d : &d->seek_q, c->work[i].dist) < 0)
				c->worker_oom = 1;
		}
		pthread_mutex_lock(&c->mu);
		c->done[which] = c->generation;
		if (--c->busy == 0)
			pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
	}
}

/* wait (without the GIL) until the worker has inserted everything handed to it */
static void wait_idle(Core *c)
{
	if (!c->started)
		return;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&c->mu);
	while (c->busy > 0)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	Py_END_ALLOW_THREADS
}

static int hand_over(Core *c)
{
	if (!c->njobs)
		return 0;
	seekjob_t *tj = c->work;
	size_t tc = c->capwork;
	c->work = c->jobs;
	c->capwork = c->capjobs;
	c->nwork = c->njobs;
	c->jobs = tj;
	c->capjobs = tc;
	c->njobs = 0;
	if (!c->started) {
		pthread_mutex_init(&c->mu, NULL);
		pthread_cond_init(&c->cv, NULL);
		int ok = 1;
		for (int w = 0; w < 2 && ok; w++) {
			worker_arg_t *a = malloc(sizeof(*a));
			if (!a) {
				ok = 0;
				break;
			}
			a->c = c;
			a->which = w;
			if (pthread_create(&c->worker[w], NULL, seek_worker, a) != 0) {
				free(a);
				ok = 0;
				if (w == 1) {   /* one worker runs: stop it before inserting here */
					pthread_mutex_lock(&c->mu);
					c->quit = 1;
					pthread_cond_broadcast(&c->cv);
					pthread_mutex_unlock(&c->mu);
					pthread_join(c->worker[0], NULL);
				}
			}
		}
		if (!ok) {   /* no threads: insert here */
			pthread_mutex_destroy(&c->mu);
			pthread_cond_destroy(&c->cv);
			for (size_t i = 0; i < c->nwork; i++) {
				dev_t_ *d = &c->devs[c->work[i].tree >> 1];
				if (st_insert((c->work[i].tree & 1) ? &d->seek_d : &d->seek_q, c->work[i].dist) < 0)
					return -1;
			}
			c->quit = 0;
			return 0;
		}
		c->started = 1;
	}
	pthread_mutex_lock(&c->mu);
	c->busy = 2;
	c->generation++;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* ------------------------------------------------------------------ btt pairing */

static PyObject *Core_feed(Core *c, PyObject *args)
{
	PyObject *o[9];
	Py_ssize_t n;
	Py_buffer b[9];
	static const Py_ssize_t sz[9] = {8, 2, 4, 8, 4, 4, 1, 8, 4};
	static const char *names[9] = {"ts", "act", "dev", "sector", "bytes", "proc", "rd", "aux", "auxdev"};
	int got = 0;

	if (!PyArg_ParseTuple(args, "nOOOOOOOOO", &n, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8]))
		return NULL;
	wait_idle(c);
	if (c->worker_oom) {
		PyErr_NoMemory();
		return NULL;
	}
	for (got = 0; got < 9; got++)
		if (get_buf(o[got], &b[got], sz[got], n, names[got]) < 0)
			goto fail;

	const uint64_t *ts = b[0].buf, *sector = b[3].buf, *aux = b[7].buf;
	const uint16_t *act = b[1].buf;
	const int32_t *devi = b[2].buf, *proc = b[5].buf, *auxdev = b[8].buf;
	const uint32_t *bytes = b[4].buf;
	const uint8_t *rd = b[6].buf;
	int32_t maxdev = -1, maxproc = -1;

	for (Py_ssize_t k = 0; k < n; k++) {
		if (devi[k] > maxdev) maxdev = devi[k];
		if (auxdev[k] > maxdev) maxdev = auxdev[k];
		if (proc[k] > maxproc) maxproc = proc[k];
	}
	if ((maxdev >= 0 && ensure_dev(c, (size_t)maxdev) < 0) || (maxproc >= 0 && ensure_proc(c, (size_t)maxproc) < 0)) {
		PyErr_NoMemory();
		goto fail;
	}
	for (int k = 0; k < K_NKINDS; k++)
		c->nout[k] = 0;
	c->nio = 0;

	Py_BEGIN_ALLOW_THREADS
	size_t *hits = NULL;
	size_t caphits = 0;
	for (Py_ssize_t k = 0; k < n && !c->oom; k++) {
		uint64_t t = ts[k], sec = sector[k];
		int a = act[k];
		int32_t di = devi[k];
		dev_t_ *d;

		if (di < 0)
			continue;
		if (a == A_PLUG || a == A_UNPLUG_IO || a == A_UNPLUG_TIMER) {
			d = &c->devs[di];
			if (!d->alloc)
				continue;
			if (a == A_PLUG) {
				if (!d->plugged) {
					d->plugged = 1;
					d->last_plug = t;
				}
			} else if (d->plugged) {
				if (a == A_UNPLUG_IO) {
					d->nplugs++;
					d->nios_up += aux[k];
				} else {
					d->nplugs_t++;
					d->nios_upt += aux[k];
				}
				d->plugged = 0;
				d->plugged_s += bit_time(t - c->tz) - bit_time(d->last_plug - c->tz);
			}
			continue;
		}
		if (!(a == A_QUEUE || a == A_REMAP || a == A_INSERT || a == A_GETRQ || a == A_BACKMERGE ||
		      a == A_FRONTMERGE || a == A_REQUEUE || a == A_ISSUE || a == A_COMPLETE || a == A_SLEEPRQ ||
		      a == A_SPLIT))
			continue;
		if (a == A_SPLIT) {
			/* The bio queued at sec was split: its first part keeps [sec, rest), the rest
			 * continues at rest as a piece of its own (G, I, D, C of its own, the bio's Q time).
			 * btt ignores X (nothing else here counts it) and keeps the whole bio as one I/O
			 * that no piece completes. */
			d = &c->devs[di];
			if (!d->alloc || d->culling)
				continue;
			uint64_t rest = aux[k];
			qrec_t *q = find_sec(d, sec);
			if (!q || q->s != sec || rest <= q->s || rest >= q->e)
				continue;
			/* the bio's whole range, once (a piece split again lies inside it) */
			if (!d->nstale || !in_stale(d, q->s, q->e)) {
				if (add_stale(d, q->s, q->e) < 0) {
					c->oom = 1;
					break;
				}
				d->split_bios++;
			}
			if (grow_q(d) < 0) {
				c->oom = 1;
				break;
			}
			q = find_sec(d, sec); /* the array may have moved */
			q->split = 1;
			qrec_t piece = *q;
			q->e = rest;
			piece.s = rest;
			piece.g = piece.i = piece.m = piece.d = NONE;
			piece.sl = 0;
			size_t j = lower(d, rest);
			memmove(&d->q[j + 1], &d->q[j], (d->nq - j) * sizeof(qrec_t));
			d->q[j] = piece;
			d->nq++;
			d->split_pieces++;
			continue;
		}
		if (bytes[k] == 0 && a != A_REQUEUE && a != A_REMAP)
			continue;
		d = setup_dev(c, di, t);
		if (d->culling) {
			if (a == A_QUEUE || a == A_REMAP) {
				d->culling = 0;
			} else {
				d->culled++;
				if (a == A_COMPLETE && c->io_on)
					emit_io_start(c, di, c->nfed + (uint64_t)k, t, sec, sec + (bytes[k] >> 9));
				continue;
			}
		}
		d->end_time = t;
		uint64_t e = sec + (bytes[k] >> 9);
		qrec_t *q;

		switch (a) {
		case A_QUEUE: {
			size_t i = lower(d, sec);
			/* A Q at the start sector of one in flight takes its place (btt tracks one I/O per
			 * start sector, and the newer wins); the older is never completed: counted here. */
			int replace = i < d->nq && d->q[i].s == sec;
			int32_t p = proc[k];
			if (!c->no_seeks && queue_seek(c, di * 2, st_dist(&d->seek_q, (int64_t)sec, (int64_t)e)) < 0) {
				c->oom = 1;
				break;
			}
			int kind = d->dm ? K_Q2Q_DM : K_Q2Q;
			if (c->last_q != NONE)
				emit(c, kind, -1, -1, t, t > c->last_q ? t - c->last_q : 1, sec, rd[k]);
			c->last_q = t;
			if (d->last_q != NONE)
				emit(c, kind, di, -1, t, t > d->last_q ? t - d->last_q : 1, sec, rd[k]);
			d->last_q = t;
			if (p >= 0) {
				if (c->proc_last_q[p] != NONE)
					emit(c, kind, -1, p, t, t > c->proc_last_q[p] ? t - c->proc_last_q[p] : 1, sec, rd[k]);
				c->proc_last_q[p] = t;
			}
			if (replace) {
				d->dup_q++;
				if (c->io_on)
					emit_io(c, &d->q[i], di, NONE, NONE, IO_DUP);
			} else {
				if (grow_q(d) < 0) {
					c->oom = 1;
					break;
				}
				/* a Q overlapping one in flight: btt's tree search can miss one of them */
				if ((i > 0 && d->q[i - 1].e > sec) || (i < d->nq && d->q[i].s < e))
					d->overlap_q++;
				memmove(&d->q[i + 1], &d->q[i], (d->nq - i) * sizeof(qrec_t));
				d->nq++;
			}
			q = &d->q[i];
			q->t = t;
			q->s = sec;
			q->e = e;
			q->g = q->i = q->m = q->d = NONE;
			q->sl = 0;
			q->proc = p;
			q->rd = rd[k];
			q->split = 0;
			q->rq = 0;
			q->ord = c->nfed + (uint64_t)k;
			if (bn_insert(c, d, t, sec, e) < 0) {
				c->oom = 1;
				break;
			}
			d->n_qs++;
			d->t_act_q += d->n_act_q;
			d->n_act_q++;
			break;
		}
		case A_GETRQ:
			q = find_sec(d, sec);
			if (q) {
				int32_t b = bn_find(c, d, sec);
				if (b < 0 || c->bn[b].t != q->t || c->bn[b].s != q->s) {
					if (q->split) d->btt_g_split++;
					else if (d->nstale && in_stale(d, q->s, q->e)) d->btt_g_range++;
					else d->btt_g_other++;
				}
				q->g = t;
				emit(c, K_Q2G, di, q->proc, t, tdelta(q->t, t), q->s, q->rd);
				if (q->sl != 0)
					emit(c, K_S2G, di, q->proc, t, tdelta(q->sl, t), q->s, q->rd);
			}
			break;
		case A_SLEEPRQ:
			q = find_sec(d, sec);
			if (q)
				q->sl = t;
			break;
		case A_INSERT:
			q = find_sec(d, sec);
			if (q) {
				q->i = t;
				if (q->g != NONE)
					emit(c, K_G2I, di, q->proc, t, tdelta(q->g, t), q->s, q->rd);
			}
			break;
		case A_BACKMERGE:
		case A_FRONTMERGE:
			q = find_sec(d, sec);
			if (q) {
				q->m = t;
				emit(c, K_Q2M, di, q->proc, t, tdelta(q->t, t), q->s, q->rd);
			}
			if (d->n_act_q)
				d->n_act_q--;
			break;
		case A_REQUEUE:
			if (c->io_on && (q = find_sec(d, sec)) != NULL)
				q->rq++;
			d->n_qs++;
			d->t_act_q += d->n_act_q;
			d->n_act_q++;
			break;
		case A_REMAP: {
			int32_t si = auxdev[k];
			if (si >= 0 && c->devs[si].alloc) {
				q = find_sec(&c->devs[si], aux[k]);
				if (q)
					emit(c, c->devs[si].dm ? K_Q2A_DM : K_Q2A, si, q->proc, t, tdelta(q->t, t), q->s, q->rd);
			}
			break;
		}
		case A_ISSUE: {
			if (d->n_act_q)
				d->n_act_q--;
			if (!c->no_seeks && queue_seek(c, di * 2 + 1, st_dist(&d->seek_d, (int64_t)sec, (int64_t)e)) < 0) {
				c->oom = 1;
				break;
			}
			d->n_ds++;
			c->nbhits = 0;
			if (bn_walk(c, d->broot, sec, e) < 0) {
				c->oom = 1;
				break;
			}
			for (size_t j = 0; j < c->nbhits; j++)
				c->bn[c->bhits[j]].d = t;
			for (size_t i = lower(d, sec); i < d->nq && d->q[i].s < e; i++) {
				q = &d->q[i];
				if (q->e > e)
					continue;
				if (q->i != NONE)
					emit(c, K_I2D, di, q->proc, t, tdelta(q->i, t), q->s, q->rd);
				else if (q->m != NONE)
					emit(c, K_M2D, di, q->proc, t, tdelta(q->m, t), q->s, q->rd);
				q->d = t;
				uint64_t q2d = t - q->t;
				emit(c, K_Q2D, di, q->proc, t, q2d ? q2d : 1, q->s, q->rd);
				long ms = (long)((double)q2d / 1e6);
				int h;
				if ((int64_t)q2d < 0 || ms >= 1000) h = 9;
				else if (ms >= 500) h = 8;
				else if (ms >= 250) h = 7;
				else if (ms >= 100) h = 6;
				else if (ms >= 75) h = 5;
				else if (ms >= 50) h = 4;
				else if (ms >= 25) h = 3;
				else if (ms >= 10) h = 2;
				else if (ms >= 5) h = 1;
				else h = 0;
				d->q2d_hist[h]++;
			}
			break;
		}
		case A_COMPLETE: {
			uint64_t nblk = bytes[k] >> 9;
			if (d->blk_n == 0) {
				d->blk_min = d->blk_max = nblk;
			} else {
				if (nblk < d->blk_min) d->blk_min = nblk;
				if (nblk > d->blk_max) d->blk_max = nblk;
			}
			d->blk_n++;
			d->blk_total += nblk;
			size_t nh = 0;
			for (size_t i = lower(d, sec); i < d->nq && d->q[i].s < e; i++) {
				q = &d->q[i];
				if (q->e > e)
					continue;
				emit(c, d->dm ? K_Q2C_DM : K_Q2C, di, q->proc, q->t, tdelta(q->t, t), q->s, q->rd);
				if (q->d != NONE) {
					emit(c, K_D2C, di, q->proc, t, tdelta(q->d, t), q->s, q->rd);
					emit(c, K_LIVE, di, q->proc, q->d, t, q->s, q->rd);
				}
				if (c->io_on)
					emit_io(c, q, di, c->nfed + (uint64_t)k, t, 0);
				if (nh == caphits) {
					size_t cap = caphits ? caphits * 2 : 64;
					size_t *nhp = realloc(hits, cap * sizeof(*nhp));
					if (!nhp) {
						c->oom = 1;
						break;
					}
					hits = nhp;
					caphits = cap;
				}
				hits[nh++] = i;
			}
			if (!nh && c->io_on)
				emit_io_start(c, di, c->nfed + (uint64_t)k, t, sec, e);
			/* what btt completes here; the I/Os ioscope completes here that btt does not */
			c->nbhits = 0;
			if (c->oom || bn_walk(c, d->broot, sec, e) < 0) {
				c->oom = 1;
				break;
			}
			for (size_t h = 0; h < nh; h++) {
				qrec_t *a = &d->q[hits[h]];
				size_t j = 0;
				while (j < c->nbhits && !(c->bn[c->bhits[j]].t == a->t && c->bn[c->bhits[j]].s == a->s))
					j++;
				if (j < c->nbhits)
					continue;
				if (a->split) d->btt_diff_split++;
				else if (d->nstale && in_stale(d, a->s, a->e)) d->btt_diff_range++;
				else d->btt_diff_other++;
			}
			for (size_t j = 0; j < c->nbhits; j++) {
				d->btt_q2c_n++;
				if (c->bn[c->bhits[j]].d != NONE)
					d->btt_d2c_n++;
			}
			for (size_t j = 0; j < c->nbhits; j++)
				bn_erase(c, d, c->bhits[j]);
			if (nh) {  /* drop the completed Qs, keeping the array sorted */
				size_t w = hits[0], h = 0;
				for (size_t r = hits[0]; r < d->nq; r++) {
					if (h < nh && hits[h] == r) {
						h++;
						continue;
					}
					d->q[w++] = d->q[r];
				}
				d->nq = w;
			}
			break;
		}
		}
	}
	free(hits);
	c->nfed += (uint64_t)n;
	Py_END_ALLOW_THREADS

	for (int i = 0; i < got; i++)
		PyBuffer_Release(&b[i]);
	if (c->oom || hand_over(c) < 0)
		return PyErr_NoMemory();
	PyObject *res = PyTuple_New(K_NKINDS);
	if (!res)
		return NULL;
	for (int k = 0; k < K_NKINDS; k++) {
		PyObject *b = PyBytes_FromStringAndSize((const char *)c->out[k], (Py_ssize_t)(c->nout[k] * sizeof(rec_t)));
		if (!b) {
			Py_DECREF(res);
			return NULL;
		}
		PyTuple_SET_ITEM(res, k, b);
	}
	return res;
fail:
	for (int i = 0; i < got; i++)
		PyBuffer_Release(&b[i]);
	return NULL;
}

static PyObject *Core_set_remapper(Core *c, PyObject *args)
{
	int idx, dm;
	if (!PyArg_ParseTuple(args, "ip", &idx, &dm))
		return NULL;
	wait_idle(c);   /* ensure_dev may move the devices the worker is inserting into */
	if (idx < 0 || ensure_dev(c, (size_t)idx) < 0)
		return PyErr_NoMemory();
	c->devs[idx].dm = dm;
	Py_RETURN_NONE;
}

#define SET_U64(dict, name, val) do { \
		PyObject *v_ = PyLong_FromUnsignedLongLong((unsigned long long)(val)); \
		if (!v_ || PyDict_SetItemString(dict, name, v_) < 0) { Py_XDECREF(v_); goto err; } \
		Py_DECREF(v_); \
	} while (0)

#define SET_F64(dict, name, val) do { \
		PyObject *v_ = PyFloat_FromDouble(val); \
		if (!v_ || PyDict_SetItemString(dict, name, v_) < 0) { Py_XDECREF(v_); goto err; } \
		Py_DECREF(v_); \
	} while (0)

static PyObject *Core_devices(Core *c, PyObject *unused)
{
	wait_idle(c);
	if (c->worker_oom)
		return PyErr_NoMemory();
	PyObject *list = PyList_New(0), *dct = NULL;
	if (!list)
		return NULL;
	for (size_t k = 0; k < c->norder; k++) {
		int32_t idx = c->order[k];
		dev_t_ *d = &c->devs[idx];
		uint64_t issued = 0;
		for (size_t i = 0; i < d->nq; i++)
			if (d->q[i].d != NONE)
				issued++;
		dct = PyDict_New();
		if (!dct)
			goto err;
		SET_U64(dct, "idx", idx);
		SET_U64(dct, "start_time", d->start_time);
		SET_U64(dct, "end_time", d->end_time);
		SET_U64(dct, "n_qs", d->n_qs);
		SET_U64(dct, "n_ds", d->n_ds);
		SET_U64(dct, "t_act_q", d->t_act_q);
		SET_U64(dct, "dup_q", d->dup_q);
		SET_U64(dct, "culled", d->culled);
		SET_U64(dct, "overlap_q", d->overlap_q);
		SET_U64(dct, "split_pieces", d->split_pieces);
		SET_U64(dct, "split_bios", d->split_bios);
		SET_U64(dct, "btt_q2c_n", d->btt_q2c_n);
		SET_U64(dct, "btt_d2c_n", d->btt_d2c_n);
		SET_U64(dct, "btt_diff_split", d->btt_diff_split);
		SET_U64(dct, "btt_diff_range", d->btt_diff_range);
		SET_U64(dct, "btt_diff_other", d->btt_diff_other);
		SET_U64(dct, "btt_g_split", d->btt_g_split);
		SET_U64(dct, "btt_g_range", d->btt_g_range);
		SET_U64(dct, "btt_g_other", d->btt_g_other);
		SET_U64(dct, "btt_in_flight", d->bn_live);
		SET_U64(dct, "plugged", d->plugged);
		SET_U64(dct, "last_plug", d->last_plug);
		SET_F64(dct, "plugged_s", d->plugged_s);
		SET_U64(dct, "nplugs", d->nplugs);
		SET_U64(dct, "nplugs_t", d->nplugs_t);
		SET_U64(dct, "nios_up", d->nios_up);
		SET_U64(dct, "nios_upt", d->nios_upt);
		SET_U64(dct, "blk_n", d->blk_n);
		SET_U64(dct, "blk_total", d->blk_total);
		SET_U64(dct, "blk_min", d->blk_min);
		SET_U64(dct, "blk_max", d->blk_max);
		SET_U64(dct, "inflight", d->nq);
		SET_U64(dct, "inflight_issued", issued);
		PyObject *h = PyList_New(10);
		if (!h)
			goto err;
		for (int i = 0; i < 10; i++)
			PyList_SET_ITEM(h, i, PyLong_FromUnsignedLongLong(d->q2d_hist[i]));
		if (PyDict_SetItemString(dct, "q2d_hist", h) < 0) {
			Py_DECREF(h);
			goto err;
		}
		Py_DECREF(h);
		PyObject *sq = st_export(&d->seek_q), *sd = st_export(&d->seek_d);
		if (!sq || !sd || PyDict_SetItemString(dct, "seek_q2q", sq) < 0 || PyDict_SetItemString(dct, "seek_d2d", sd) < 0) {
			Py_XDECREF(sq);
			Py_XDECREF(sd);
			goto err;
		}
		Py_DECREF(sq);
		Py_DECREF(sd);
		if (PyList_Append(list, dct) < 0)
			goto err;
		Py_CLEAR(dct);
	}
	return list;
err:
	Py_XDECREF(dct);
	Py_DECREF(list);
	return NULL;
}

static PyObject *Core_min_issued(Core *c, PyObject *args)
{
	int idx;
	if (!PyArg_ParseTuple(args, "i", &idx))
		return NULL;
	uint64_t best = NONE;
	if (idx >= 0 && (size_t)idx < c->ndevs) {
		dev_t_ *d = &c->devs[idx];
		for (size_t i = 0; i < d->nq; i++)
			if (d->q[i].d != NONE && d->q[i].d < best)
				best = d->q[i].d;
	}
	if (best == NONE)
		return PyLong_FromLong(-1);
	return PyLong_FromUnsignedLongLong(best);
}

static PyObject *Core_set_seeks(Core *c, PyObject *args)
{
	int on;
	if (!PyArg_ParseTuple(args, "p", &on))
		return NULL;
	c->no_seeks = !on;
	Py_RETURN_NONE;
}

static PyObject *Core_set_io_records(Core *c, PyObject *args)
{
	int on;
	if (!PyArg_ParseTuple(args, "p", &on))
		return NULL;
	c->io_on = on;
	Py_RETURN_NONE;
}

/* the per-I/O records of the last feed (or flush) */
static PyObject *Core_take_io(Core *c, PyObject *unused)
{
	PyObject *b = PyBytes_FromStringAndSize((const char *)c->io, (Py_ssize_t)(c->nio * sizeof(iorec_t)));
	c->nio = 0;
	return b;
}

/* the smallest Q ordinal of the I/Os in flight (-1: none): attributes of older Qs are no longer needed */
static PyObject *Core_min_ord(Core *c, PyObject *unused)
{
	uint64_t best = NONE;
	for (size_t k = 0; k < c->norder; k++) {
		dev_t_ *d = &c->devs[c->order[k]];
		for (size_t i = 0; i < d->nq; i++)
			if (d->q[i].ord < best)
				best = d->q[i].ord;
	}
	if (best == NONE)
		return PyLong_FromLong(-1);
	return PyLong_FromUnsignedLongLong(best);
}

/* records for every I/O still in flight (IO_END), in device order; take them with take_io() */
static PyObject *Core_io_flush(Core *c, PyObject *unused)
{
	wait_idle(c);
	c->nio = 0;
	for (size_t k = 0; k < c->norder && !c->oom; k++) {
		int32_t idx = c->order[k];
		dev_t_ *d = &c->devs[idx];
		for (size_t i = 0; i < d->nq && !c->oom; i++)
			emit_io(c, &d->q[i], idx, NONE, NONE, IO_END);
	}
	if (c->oom)
		return PyErr_NoMemory();
	Py_RETURN_NONE;
}

static void Core_dealloc(Core *c)
{
	if (c->started) {
		pthread_mutex_lock(&c->mu);
		c->quit = 1;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
		Py_BEGIN_ALLOW_THREADS
		pthread_join(c->worker[0], NULL);
		pthread_join(c->worker[1], NULL);
		Py_END_ALLOW_THREADS
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
	}
	free(c->jobs);
	free(c->work);
	for (size_t i = 0; i < c->ndevs; i++) {
		free(c->devs[i].q);
		free(c->devs[i].stale);
		free(c->devs[i].seek_q.n);
		free(c->devs[i].seek_d.n);
	}
	free(c->devs);
	free(c->bn);
	free(c->bhits);
	free(c->order);
	free(c->proc_last_q);
	free(c->io);
	for (int k = 0; k < K_NKINDS; k++)
		free(c->out[k]);
	Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *Core_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	Core *c = (Core *)type->tp_alloc(type, 0);
	if (c) {
		c->last_q = NONE;
		c->bfree = -1;
	}
	return (PyObject *)c;
}

static PyObject *Core_set_time_zero(Core *c, PyObject *args)
{
	unsigned long long tz;

	if (!PyArg_ParseTuple(args, "K", &tz))
		return NULL;
	c->tz = tz;
	Py_RETURN_NONE;
}

static PyMethodDef Core_methods[] = {
	{"set_time_zero", (PyCFunction)Core_set_time_zero, METH_VARARGS,
	 "set_time_zero(ns): the time btt's times count from (0 in a blktrace file), before the first feed"},
	{"feed", (PyCFunction)Core_feed, METH_VARARGS,
	 "feed(n, ts, act, dev, sector, bytes, proc, rd, aux, auxdev) -> tuple: bytes of records per kind"},
	{"set_remapper", (PyCFunction)Core_set_remapper, METH_VARARGS, "set_remapper(dev_idx, flag)"},
	{"min_issued", (PyCFunction)Core_min_issued, METH_VARARGS,
	 "min_issued(dev_idx): earliest issue time of a Q still in flight on the device, or -1"},
	{"devices", (PyCFunction)Core_devices, METH_NOARGS, "per-device counters, in allocation order"},
	{"set_io_records", (PyCFunction)Core_set_io_records, METH_VARARGS,
	 "set_io_records(flag): emit one record per I/O (take_io), before the first feed"},
	{"set_seeks", (PyCFunction)Core_set_seeks, METH_VARARGS,
	 "set_seeks(flag): build the seek trees (default True), before the first feed"},
	{"take_io", (PyCFunction)Core_take_io, METH_NOARGS, "bytes of the per-I/O records of the last feed or flush"},
	{"io_flush", (PyCFunction)Core_io_flush, METH_NOARGS, "per-I/O records of the I/Os still in flight"},
	{"min_ord", (PyCFunction)Core_min_ord, METH_NOARGS, "smallest Q ordinal in flight, or -1"},
	{NULL}
};

static PyTypeObject CoreType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ioscope.trace._tracecore.Core",
	.tp_basicsize = sizeof(Core),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = Core_new,
	.tp_dealloc = (destructor)Core_dealloc,
	.tp_methods = Core_methods,
	.tp_doc = "btt's event pairing state (in-flight Qs per device)",
};


/* ------------------------------------------------------------------ blkparse's default lines */

/* per (device, cpu) counters, in this order (ioscope/tools/parse/blkparse.py:CPU_FIELDS) */
enum {
	S_QREADS, S_QWRITES, S_CREADS, S_CWRITES, S_MREADS, S_MWRITES, S_IREADS, S_IWRITES, S_RRQUEUE, S_WRQUEUE,
	S_QREAD_KB, S_QWRITE_KB, S_CREAD_KB, S_CWRITE_KB, S_QREAD_B, S_QWRITE_B, S_CREAD_B, S_CWRITE_B,
	S_IREAD_KB, S_IWRITE_KB, S_MREAD_KB, S_MWRITE_KB, S_MREAD_B, S_MWRITE_B, S_IREAD_B, S_IWRITE_B,
	S_IO_UNPLUGS, S_TIMER_UNPLUGS, S_NELEMS, S_NFIELDS
};
/* per device (DEV_FIELDS) */
enum { D_CUR_R, D_CUR_W, D_MAX_R, D_MAX_W, D_EVENTS, D_FIRST, D_LAST, D_NFIELDS };

#define TC_WRITE_ (1 << 1)
#define TC_FLUSH_ (1 << 2)
#define TC_SYNC_ (1 << 3)
#define TC_AHEAD_ (1 << 11)
#define TC_META_ (1 << 12)
#define TC_DISCARD_ (1 << 13)
#define TC_FUA_ (1 << 15)

static void fill_rwbs(char *out, unsigned cat, uint32_t bytes)
{
	int i = 0;
	if (cat & TC_FLUSH_) out[i++] = 'F';
	if (cat & TC_DISCARD_) out[i++] = 'D';
	else if (cat & TC_WRITE_) out[i++] = 'W';
	else if (bytes) out[i++] = 'R';
	else out[i++] = 'N';
	if (cat & TC_FUA_) out[i++] = 'F';
	if (cat & TC_AHEAD_) out[i++] = 'A';
	if (cat & TC_SYNC_) out[i++] = 'S';
	if (cat & TC_META_) out[i++] = 'M';
	out[i] = 0;
}

typedef struct {
	char *p;
	size_t n, cap;
	int oom;
} sbuf_t;

static void sb_reserve(sbuf_t *b, size_t more)
{
	if (b->n + more <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 1 << 16;
	while (cap < b->n + more)
		cap *= 2;
	char *np = realloc(b->p, cap);
	if (!np) {
		b->oom = 1;
		return;
	}
	b->p = np;
	b->cap = cap;
}

/*
 * format_blkparse(n, t, seq, dev, devidx, cpu, pid, pidx, act, cat, sector, bytes, err, aux, auxdev,
 *                 mask, comms, cpustats, ncpus, devstats[, text]) -> bytes
 * Lines of blkparse's default format for events already sorted; updates blkparse's counters in
 * cpustats (int64, [ndev][ncpus][S_NFIELDS]) and devstats (int64, [ndev][D_NFIELDS]) in place.
 * comms: a list of bytes, the command of pidx[k]. Actions blkparse does not print count as events
 * and print nothing (act_unknown counts them).
 */
static PyObject *format_blkparse(PyObject *self, PyObject *args)
{
	Py_ssize_t n;
	PyObject *o[15], *comms, *ocs, *ods;
	unsigned int mask;
	int ncpus, text = 1;
	static const Py_ssize_t sz[15] = {8, 4, 4, 4, 2, 4, 4, 2, 2, 8, 4, 2, 8, 4, 0};
	Py_buffer b[15], bcs, bds;
	int got = 0, have_cs = 0, have_ds = 0;
	if (!PyArg_ParseTuple(args, "nOOOOOOOOOOOOOOIOOiO|p", &n, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
			      &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &mask, &comms, &ocs, &ncpus, &ods, &text))
		return NULL;
	if (!PyList_Check(comms)) {
		PyErr_SetString(PyExc_TypeError, "comms must be a list of bytes");
		return NULL;
	}
	for (got = 0; got < 14; got++)
		if (get_buf(o[got], &b[got], sz[got], n, "field") < 0)
			goto fail;
	if (PyObject_GetBuffer(ocs, &bcs, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
		goto fail;
	have_cs = 1;
	if (PyObject_GetBuffer(ods, &bds, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
		goto fail;
	have_ds = 1;
	const int64_t *t = b[0].buf;
	const uint32_t *seq = b[1].buf, *dev = b[2].buf, *pid = b[5].buf, *bytes = b[10].buf, *auxdev = b[13].buf;
	const int32_t *devidx = b[3].buf, *pidx = b[6].buf;
	const uint16_t *cpu = b[4].buf, *act = b[7].buf, *cat = b[8].buf, *err = b[11].buf;
	const uint64_t *sector = b[9].buf, *aux = b[12].buf;
	int64_t *cs = bcs.buf, *ds = bds.buf;
	Py_ssize_t ncomms = PyList_GET_SIZE(comms);
	int32_t maxdev = -1;
	for (Py_ssize_t k = 0; k < n; k++) {
		if (devidx[k] > maxdev) maxdev = devidx[k];
		if (cpu[k] >= ncpus || pidx[k] < 0 || pidx[k] >= ncomms) {
			PyErr_SetString(PyExc_ValueError, "cpu or process index out of range");
			goto fail;
		}
	}
	if ((Py_ssize_t)((maxdev + 1) * ncpus * S_NFIELDS * 8) > bcs.len || (Py_ssize_t)((maxdev + 1) * D_NFIELDS * 8) > bds.len) {
		PyErr_SetString(PyExc_ValueError, "counter arrays too small");
		goto fail;
	}
	sbuf_t sb = {0};
	for (Py_ssize_t k = 0; k < n && !sb.oom; k++) {
		int64_t *c = cs + ((size_t)devidx[k] * ncpus + cpu[k]) * S_NFIELDS;
		int64_t *d = ds + (size_t)devidx[k] * D_NFIELDS;
		d[D_LAST] = t[k];
		c[S_NELEMS]++;
		if (!(cat[k] & mask))
			continue;
		if (!d[D_EVENTS])
			d[D_FIRST] = t[k];
		d[D_EVENTS]++;
		int w = (cat[k] & TC_WRITE_) != 0, a = act[k];
		uint32_t nb = bytes[k];
		const char *letters;
		switch (a) {
		case A_QUEUE: letters = "Q"; c[w ? S_QWRITES : S_QREADS]++; c[w ? S_QWRITE_KB : S_QREAD_KB] += nb >> 10;
			c[w ? S_QWRITE_B : S_QREAD_B] += nb & 1023; break;
		case A_BACKMERGE: case A_FRONTMERGE: letters = a == A_BACKMERGE ? "M" : "F";
			c[w ? S_MWRITES : S_MREADS]++; c[w ? S_MWRITE_KB : S_MREAD_KB] += nb >> 10;
			c[w ? S_MWRITE_B : S_MREAD_B] += nb & 1023; break;
		case A_REQUEUE: letters = "R"; if (d[D_CUR_R + w]) d[D_CUR_R + w]--; c[w ? S_WRQUEUE : S_RRQUEUE]++;
			c[w ? S_IWRITE_KB : S_IREAD_KB] -= nb >> 10; c[w ? S_IWRITE_B : S_IREAD_B] -= nb & 1023; break;
		case A_ISSUE: letters = "D"; c[w ? S_IWRITES : S_IREADS]++; c[w ? S_IWRITE_KB : S_IREAD_KB] += nb >> 10;
			c[w ? S_IWRITE_B : S_IREAD_B] += nb & 1023; d[D_CUR_R + w]++;
			if (d[D_CUR_R + w] > d[D_MAX_R + w])
				d[D_MAX_R + w] = d[D_CUR_R + w];
			break;
		case A_COMPLETE: letters = "C"; if (d[D_CUR_R + w]) d[D_CUR_R + w]--; c[w ? S_CWRITES : S_CREADS]++;
			c[w ? S_CWRITE_KB : S_CREAD_KB] += nb >> 10; c[w ? S_CWRITE_B : S_CREAD_B] += nb & 1023; break;
		case A_UNPLUG_IO: letters = "U"; c[S_IO_UNPLUGS]++; break;
		case A_UNPLUG_TIMER: letters = "UT"; c[S_TIMER_UNPLUGS]++; break;
		case A_INSERT: letters = "I"; break;
		case A_GETRQ: letters = "G"; break;
		case A_SLEEPRQ: letters = "S"; break;
		case A_PLUG: letters = "P"; break;
		case A_SPLIT: letters = "X"; break;
		case A_BOUNCE: letters = "B"; break;
		case A_REMAP: letters = "A"; break;
		default: continue;   /* driver data (17) and unknown actions: counted, not printed */
		}
		if (!text)
			continue;
		char rw[8];
		fill_rwbs(rw, cat[k], nb);
		const char *name = PyBytes_AS_STRING(PyList_GET_ITEM(comms, pidx[k]));
		sb_reserve(&sb, 160 + strlen(name));
		if (sb.oom)
			break;
		char *q = sb.p + sb.n;
		int len = sprintf(q, "%3u,%-3u %2u %8u %5lld.%09lld %5u %2s %3s ", dev[k] >> 20, dev[k] & 0xfffff, cpu[k],
				  seq[k], (long long)(t[k] / 1000000000), (long long)(t[k] % 1000000000), pid[k], letters, rw);
		unsigned nsec = nb >> 9;
		unsigned long long sec = (unsigned long long)sector[k];
		switch (a) {
		case A_REQUEUE: case A_COMPLETE:
			len += nsec ? sprintf(q + len, "%llu + %u [%u]\n", sec, nsec, err[k]) : sprintf(q + len, "%llu [%u]\n", sec, err[k]);
			break;
		case A_PLUG:
			len += sprintf(q + len, "[%s]\n", name);
			break;
		case A_UNPLUG_IO: case A_UNPLUG_TIMER:
			len += sprintf(q + len, "[%s] %u\n", name, (unsigned)(aux[k] & 0xffffffffu));
			break;
		case A_REMAP:
			len += sprintf(q + len, "%llu + %u <- (%u,%u) %llu\n", sec, nsec, auxdev[k] >> 20, auxdev[k] & 0xfffff,
				       (unsigned long long)aux[k]);
			break;
		case A_SPLIT:
			len += sprintf(q + len, "%llu / %u [%s]\n", sec, (unsigned)(aux[k] & 0xffffffffu), name);
			break;
		default:
			len += nsec ? sprintf(q + len, "%llu + %u [%s]\n", sec, nsec, name) : sprintf(q + len, "[%s]\n", name);
		}
		sb.n += (size_t)len;
	}
	PyObject *res = sb.oom ? PyErr_NoMemory() : PyBytes_FromStringAndSize(sb.p ? sb.p : "", (Py_ssize_t)sb.n);
	free(sb.p);
	for (int i = 0; i < got; i++)
		PyBuffer_Release(&b[i]);
	PyBuffer_Release(&bcs);
	PyBuffer_Release(&bds);
	return res;
fail:
	for (int i = 0; i < got; i++)
		PyBuffer_Release(&b[i]);
	if (have_cs)
		PyBuffer_Release(&bcs);
	if (have_ds)
		PyBuffer_Release(&bds);
	return NULL;
}

/*
 * 3. pack_events: the capture writer's hot loop. Rows of struct trace_event
 *    (56 bytes, events.py:EVENT), optionally taken in the order of an index
 *    array, become the 13 columns of an Arrow record batch in one pass; the
 *    chunk checksum (capture.py:checksum: the sum of the rows' 64-bit words
 *    and their sum weighted by 1, 3, 5, ... in output order, both mod 2^64)
 *    and the count of rows per action code come out of the same pass.
 */
#pragma pack(push, 1)
typedef struct {
	uint64_t ts, sector, aux;
	uint32_t bytes, dev, aux_dev, pid, tgid;
	uint16_t cpu, error, action, category;
	uint32_t flags;
} event_t;
#pragma pack(pop)
_Static_assert(sizeof(event_t) == 56, "struct trace_event is 56 bytes");

static PyObject *pack_events(PyObject *self, PyObject *args)
{
	Py_buffer rows, order = {0};
	PyObject *order_obj = Py_None, *cols[13] = {0}, *res = NULL, *counts = NULL;
	static const size_t width[13] = {8, 8, 8, 4, 4, 4, 4, 4, 2, 2, 2, 2, 4};
	Py_ssize_t n, nrows, i;
	uint64_t s1 = 0, s2 = 0, w = 1, *cnt;
	char *dst[13];
	int c;

	if (!PyArg_ParseTuple(args, "y*|O", &rows, &order_obj))
		return NULL;
	if (rows.len % (Py_ssize_t)sizeof(event_t)) {
		PyErr_SetString(PyExc_ValueError, "pack_events: rows are not a whole number of 56-byte events");
		goto out;
	}
	nrows = rows.len / (Py_ssize_t)sizeof(event_t);
	n = nrows;
	if (order_obj != Py_None) {
		if (PyObject_GetBuffer(order_obj, &order, PyBUF_SIMPLE) < 0)
			goto out;
		if (order.len % 8) {
			PyErr_SetString(PyExc_ValueError, "pack_events: order must be int64");
			goto out;
		}
		n = order.len / 8;
		for (i = 0; i < n; i++) {
			int64_t k = ((const int64_t *)order.buf)[i];
			if (k < 0 || k >= nrows) {
				PyErr_SetString(PyExc_IndexError, "pack_events: order index out of range");
				goto out;
			}
		}
	}
	for (c = 0; c < 13; c++) {
		cols[c] = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)width[c]);
		if (!cols[c])
			goto out;
		dst[c] = PyBytes_AS_STRING(cols[c]);
	}
	counts = PyBytes_FromStringAndSize(NULL, 32 * 8);
	if (!counts)
		goto out;
	cnt = (uint64_t *)PyBytes_AS_STRING(counts);
	memset(cnt, 0, 32 * 8);
	Py_BEGIN_ALLOW_THREADS
	{
		const event_t *ev = rows.buf;
		const int64_t *ord = order.buf;
		uint64_t *ts = (uint64_t *)dst[0], *sec = (uint64_t *)dst[1], *aux = (uint64_t *)dst[2];
		uint32_t *by = (uint32_t *)dst[3], *dev = (uint32_t *)dst[4], *adev = (uint32_t *)dst[5];
		uint32_t *pid = (uint32_t *)dst[6], *tgid = (uint32_t *)dst[7], *fl = (uint32_t *)dst[12];
		uint16_t *cpu = (uint16_t *)dst[8], *err = (uint16_t *)dst[9], *act = (uint16_t *)dst[10];
		uint16_t *cat = (uint16_t *)dst[11];

		for (i = 0; i < n; i++) {
			const event_t *e = ord ? &ev[ord[i]] : &ev[i];
			uint64_t words[7];

			memcpy(words, e, sizeof(words));
			for (c = 0; c < 7; c++, w += 2) {
				s1 += words[c];
				s2 += words[c] * w;
			}
			ts[i] = e->ts;
			sec[i] = e->sector;
			aux[i] = e->aux;
			by[i] = e->bytes;
			dev[i] = e->dev;
			adev[i] = e->aux_dev;
			pid[i] = e->pid;
			tgid[i] = e->tgid;
			cpu[i] = e->cpu;
			err[i] = e->error;
			act[i] = e->action;
			cat[i] = e->category;
			fl[i] = e->flags;
			if (e->action < 32)
				cnt[e->action]++;
		}
	}
	Py_END_ALLOW_THREADS
	{
		PyObject *lst = PyList_New(13);
		if (!lst)
			goto out;
		for (c = 0; c < 13; c++) {
			PyList_SET_ITEM(lst, c, cols[c]);
			cols[c] = NULL;
		}
		res = Py_BuildValue("(NKKO)", lst, (unsigned long long)s1, (unsigned long long)s2, counts);
	}
out:
	for (c = 0; c < 13; c++)
		Py_XDECREF(cols[c]);
	Py_XDECREF(counts);
	PyBuffer_Release(&rows);
	if (order.obj)
		PyBuffer_Release(&order);
	return res;
}

static PyMethodDef mod_methods[] = {
	{"pack_events", pack_events, METH_VARARGS,
	 "pack_events(rows, order=None) -> ([13 column bytes], sum, weighted sum, per-action counts (32 x u64))"},
	{"format_blkparse", format_blkparse, METH_VARARGS,
	 "blkparse's default lines for sorted events; updates blkparse's counters in place"},
	{"scan_blktrace", scan_blktrace, METH_VARARGS,
	 "scan_blktrace(buf, swap, final) -> (offsets, end, status, bad_offset, bad_value)"},
	{"gather_blktrace", gather_blktrace, METH_VARARGS,
	 "gather_blktrace(buf, offsets, swap) -> 64 bytes per record: header + first 16 payload bytes"},
	{NULL}
};

static struct PyModuleDef mod = {
	PyModuleDef_HEAD_INIT, "_tracecore", "the sequential loops of ioscope's offline tools, in C", -1, mod_methods,
};

PyMODINIT_FUNC PyInit__tracecore(void)
{
	if (PyType_Ready(&CoreType) < 0)
		return NULL;
	PyObject *m = PyModule_Create(&mod);
	if (!m)
		return NULL;
	Py_INCREF(&CoreType);
	if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
		Py_DECREF(&CoreType);
		Py_DECREF(m);
		return NULL;
	}
	PyModule_AddIntConstant(m, "REC_SIZE", (long)sizeof(rec_t));
	PyModule_AddIntConstant(m, "IOREC_SIZE", (long)sizeof(iorec_t));
	return m;
}
