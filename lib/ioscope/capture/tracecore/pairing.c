/*
 * Core: report's pairing of block events. ioscope's view runs on the pairing engine every user-space pairing
 * shares (bios.c: each split piece its own I/O, the request's bios issued and completed as a chain, one
 * direction at a time), with btt's view (bttsim.c) fed from the same loop so that report can say which
 * I/Os btt pairs otherwise, and why.
 *
 * Pairing is inherently sequential (each event changes which I/Os are in flight), so it runs here, one
 * pass over each chunk of events; everything else (statistics, histograms, percentiles, active periods)
 * is done with numpy in btt.py from the records this emits: one per measured interval, at the event that
 * ends it (Q2G at the G, Q2C at the C, ...).
 *
 * What report adds to the engine's rules (btt.py lists them): a device's events before its first Q or A
 * are set aside (btt's culling); events without data are left out but R and A; Q2A pairs a remap with the
 * bio queued at its source sector; remapping devices' Q2Q, Q2A and Q2C go to the *_dm rows.
 *
 * Input per chunk: EVENT records and per-event dense indexes (feed()'s doc). Output: bytes of rec_t
 * records, one bytes object per kind; per-device counters via devices(); btt's results via btt().
 */
#include "bios.h"
#include "bttsim.h"

enum {
	K_Q2Q, K_Q2A, K_Q2G, K_S2G, K_G2I, K_Q2M, K_I2D, K_M2D, K_D2C, K_Q2C, K_Q2D,
	K_Q2Q_DM, K_Q2A_DM, K_Q2C_DM, K_NKINDS
};

#define EV_MESSAGE 2   /* btt.py: a message record, fed to btt's view only (never in a capture) */

typedef struct {
	int32_t kind, dev, proc, rd;
	uint64_t t, v, sector;
} rec_t;

/*
 * One I/O's life, for the per-I/O table (set_io_records): emitted when the I/O completes, at io_flush()
 * for those still in flight (IO_END), and for a completion that finishes no I/O queued in view (IO_START:
 * queued before the capture began; only c, ord_c, s and e are set). Times are NONE where the I/O had no
 * such event. IO_DUP: a later Q came at its start sector while it was in flight (btt's view replaced it).
 */
enum { IO_SPLIT = 1, IO_DUP = 2, IO_END = 4, IO_START = 8 };
typedef struct {
	uint64_t ord_q, ord_c, t, g, i, m, d, c, s, e;
	int32_t dev, proc;
	uint32_t rq, flags;
} iorec_t;

typedef struct {
	int alloc, culling, dm;
	uint64_t start_time, end_time;
	uint64_t last_q;
	uint64_t culled, dup_q, overlap_q;
	/* dup_q: Qs at the start sector of a bio in flight; overlap_q: Qs overlapping one btt holds at
	 * another start sector (btt's tree search can miss one of them). Split bios: pieces made (each
	 * paired on its own, with the bio's Q time); the ranges btt keeps as one I/O no piece completes
	 * (stale), and the later Qs inside one (btt may pair them with it) */
	uint64_t split_pieces, split_bios;
	/* the I/Os ioscope completes that btt does not complete at the same C, by reason: a split bio
	 * or piece, an I/O inside a split bio's range (btt keeps that range in flight for ever),
	 * anything else; and the G events btt gives to an I/O other than their own (same reasons) */
	uint64_t btt_diff_split, btt_diff_range, btt_diff_other;
	uint64_t btt_g_split, btt_g_range, btt_g_other;
	uint64_t *stale; /* [start, end) pairs, sorted by start */
	size_t nstale, capstale;
} dev_t_;

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
	uint64_t tz;             /* the trace's time zero: btt's view counts from it */
	int io_on;               /* per-I/O records wanted (set_io_records) */
	int btt_on;              /* btt's view wanted (set_btt) */
	uint64_t nfed;           /* events fed before this chunk: the base of Q and C ordinals */
	iorec_t *io;
	size_t nio, capio;
	bttsim_t sim;
	bioeng_t eng;            /* ioscope's view: the pairing engine, keyed by dense device index */
} Core;

static void emit(Core *c, int kind, int32_t dev, int32_t proc, uint64_t t, uint64_t v, uint64_t sector, int rd)
{
	if (tc_room(&c->out[kind], &c->capout[kind], c->nout[kind], sizeof(rec_t), 4096) < 0) {
		c->oom = 1;
		return;
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

static uint64_t bio_end(const bio_t *x)
{
	return x->sector + (x->nbytes >> 9);
}

static void emit_io(Core *c, const bio_t *x, int32_t dev, uint64_t ord_c, uint64_t tc, uint32_t flags)
{
	if (tc_room(&c->io, &c->capio, c->nio, sizeof(*c->io), 4096) < 0) {
		c->oom = 1;
		return;
	}
	iorec_t *r = &c->io[c->nio++];
	r->ord_q = x->ord;
	r->ord_c = ord_c;
	r->t = x->q;
	r->g = x->g;
	r->i = x->i;
	r->m = x->m;
	r->d = x->d;
	r->c = tc;
	r->s = x->sector;
	r->e = bio_end(x);
	r->dev = dev;
	r->proc = x->proc;
	r->rq = x->rq;
	r->flags = flags | (x->piece ? IO_SPLIT : 0) | (x->dup ? IO_DUP : 0);
}

/* a completion that finishes no I/O queued in view: the I/O was queued before the capture started */
static void emit_io_start(Core *c, int32_t dev, uint64_t ord_c, uint64_t tc, uint64_t s, uint64_t e)
{
	bio_t x = {.q = NONE, .sector = s, .nbytes = (uint32_t)((e - s) << 9), .g = NONE, .i = NONE, .m = NONE,
		   .d = NONE, .proc = -1, .ord = NONE};
	emit_io(c, &x, dev, ord_c, tc, IO_START);
}

static int ensure_dev(Core *c, size_t idx)
{
	if (c->btt_on && bs_ensure_dev(&c->sim, idx) < 0)
		return -1;
	size_t no = c->ndevs;
	if (idx < c->ndevs)
		return 0;
	return tc_grow(&c->order, &no, idx + 8, sizeof(*c->order)) < 0 ||
	       tc_grow(&c->devs, &c->ndevs, idx + 8, sizeof(*c->devs)) < 0 ? -1 : 0;
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

/* the device of an event (allocating it on first sight) */
static dev_t_ *setup_dev(Core *c, int32_t idx, uint64_t ts)
{
	dev_t_ *d = &c->devs[idx];
	if (!d->alloc) {
		d->alloc = 1;
		d->culling = 1;
		d->start_time = d->end_time = ts;
		d->last_q = NONE;
		c->order[c->norder++] = idx;
	}
	return d;
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
	if (tc_room(&d->stale, &d->capstale, d->nstale, 2 * sizeof(*d->stale), 16) < 0)
		return -1;
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

/* Does a Q btt holds at another start sector overlap [s, e)? (before btt's view inserts the Q at s) */
static int btt_overlaps(Core *c, int32_t bd, uint64_t s, uint64_t e)
{
	if (!c->btt_on || bd < 0 || (size_t)bd >= c->sim.ndevs || !c->sim.devs[bd].alloc)
		return 0;
	qtree_t *qt = &c->sim.qt;
	int32_t root = c->sim.devs[bd].root, x;
	if ((x = qt_find(qt, root, s)) >= 0 && qt->n[x].s != s)
		return 1;
	if (e > s + 1 && (x = qt_find(qt, root, e - 1)) >= 0 && qt->n[x].s != s)
		return 1;
	if (qt_walk(qt, root, s, e) < 0)
		return -1;
	for (size_t j = 0; j < qt->nhits; j++)
		if (qt->n[qt->hits[j]].s != s)
			return 1;
	return 0;
}

/* the engine's device key of a bio: Core's dense device index */
static int32_t bio_dev(const Core *c, const bio_t *x)
{
	return (int32_t)c->eng.devs[x->dev].dev;
}

/* does btt's view hold a Q (t, s) among those its last C completed? */
static int btt_completed(const Core *c, uint64_t t, uint64_t s)
{
	const bttsim_t *b = &c->sim;
	for (size_t j = 0; j < b->ndone; j++)
		if (b->done_ts[2 * j] == t - c->tz && b->done_ts[2 * j + 1] == s)
			return 1;
	return 0;
}

/*
 * One event in ioscope's view (a block event on a device, its process and remap source given; for a Q, the
 * bio already queued at its sector, or NULL): the engine pairs it; the intervals it ends are emitted as
 * records, and what btt's view did with it (read by btt_completed, g_node) is compared.
 */
static void ioscope_event(Core *c, const event_t *E, uint64_t ord, int32_t di, int32_t si, int32_t p, int overlap,
			  bio_t *old)
{
	bioeng_t *g = &c->eng;
	uint64_t t = E->ts, sec = E->sector, e = sec + (E->bytes >> 9);
	int a = E->action;
	dev_t_ *d;
	bio_t *x;

	if (!(a == A_QUEUE || a == A_REMAP || a == A_INSERT || a == A_GETRQ || a == A_BACKMERGE ||
	      a == A_FRONTMERGE || a == A_REQUEUE || a == A_ISSUE || a == A_COMPLETE || a == A_SLEEPRQ ||
	      a == A_SPLIT))
		return;
	if (a == A_SPLIT) {
		/* The engine cuts the bio queued at sec in two: each piece an I/O of its own, with the
		 * bio's Q time. btt ignores X (nothing else here counts it) and keeps the whole bio as one
		 * I/O that no piece completes: its range is noted for the comparisons. */
		d = &c->devs[di];
		if (!d->alloc || d->culling)
			return;
		be_event(g, E, (uint32_t)di, -1, NONE);
		if (g->nchain != 2)
			return;
		uint64_t s0 = g->split_from.sector, e0 = bio_end(&g->split_from);
		if (!d->nstale || !in_stale(d, s0, e0)) {   /* the bio's whole range, once */
			if (add_stale(d, s0, e0) < 0) {
				c->oom = 1;
				return;
			}
			d->split_bios++;
		}
		d->split_pieces++;
		return;
	}
	if (E->bytes == 0 && a != A_REQUEUE && a != A_REMAP)
		return;
	d = setup_dev(c, di, t);
	if (d->culling) {
		if (a == A_QUEUE || a == A_REMAP) {
			d->culling = 0;
		} else {
			d->culled++;
			if (a == A_COMPLETE && c->io_on)
				emit_io_start(c, di, ord, t, sec, e);
			return;
		}
	}
	d->end_time = t;
	if (a == A_REMAP) {   /* Q2A: the bio queued at the remap's source sector, on its device */
		if (si >= 0 && c->devs[si].alloc && (x = be_find(g, (uint32_t)si, E->aux)) != NULL)
			emit(c, c->devs[si].dm ? K_Q2A_DM : K_Q2A, si, x->proc, t, tdelta(x->q, t), x->sector,
			     !x->write);
		return;
	}
	if (a == A_QUEUE) {
		int kind = d->dm ? K_Q2Q_DM : K_Q2Q, rdk = (E->category & TC_READ_) != 0;
		if (c->last_q != NONE)
			emit(c, kind, -1, -1, t, t > c->last_q ? t - c->last_q : 1, sec, rdk);
		c->last_q = t;
		if (d->last_q != NONE)
			emit(c, kind, di, -1, t, t > d->last_q ? t - d->last_q : 1, sec, rdk);
		d->last_q = t;
		if (p >= 0) {
			if (c->proc_last_q[p] != NONE)
				emit(c, kind, -1, p, t, t > c->proc_last_q[p] ? t - c->proc_last_q[p] : 1, sec, rdk);
			c->proc_last_q[p] = t;
		}
		int64_t oi = old ? (int64_t)(old - g->pool) : -1;
		be_event(g, E, (uint32_t)di, p, ord);
		if (g->nchain) {   /* a bio of its own (not a split's remainder queued again) */
			if (oi >= 0) {   /* btt's view replaces the older one here, and never completes it */
				g->pool[oi].dup = 1;
				d->dup_q++;
			}
			d->overlap_q += overlap;
		}
		return;
	}
	g->nout = 0;
	be_event(g, E, (uint32_t)di, -1, NONE);
	x = g->nchain ? g->chain[0] : NULL;
	switch (a) {
	case A_GETRQ:
		if (x) {
			int32_t b = c->sim.g_node;
			if (c->btt_on && (b < 0 || c->sim.qt.n[b].t != x->q - c->tz || c->sim.qt.n[b].s != x->sector)) {
				if (x->piece) d->btt_g_split++;
				else if (d->nstale && in_stale(d, x->sector, bio_end(x))) d->btt_g_range++;
				else d->btt_g_other++;
			}
			emit(c, K_Q2G, di, x->proc, t, tdelta(x->q, t), x->sector, !x->write);
			if (x->sl != 0)
				emit(c, K_S2G, di, x->proc, t, tdelta(x->sl, t), x->sector, !x->write);
		}
		break;
	case A_INSERT:
		if (x && x->g != NONE)
			emit(c, K_G2I, di, x->proc, t, tdelta(x->g, t), x->sector, !x->write);
		break;
	case A_BACKMERGE:
	case A_FRONTMERGE:
		if (x)
			emit(c, K_Q2M, di, x->proc, t, tdelta(x->q, t), x->sector, !x->write);
		break;
	case A_ISSUE:
		for (size_t i = 0; i < g->nchain; i++) {
			x = g->chain[i];
			if (x->i != NONE)
				emit(c, K_I2D, di, x->proc, t, tdelta(x->i, t), x->sector, !x->write);
			else if (x->m != NONE)
				emit(c, K_M2D, di, x->proc, t, tdelta(x->m, t), x->sector, !x->write);
			uint64_t q2d = t - x->q;
			emit(c, K_Q2D, di, x->proc, t, q2d ? q2d : 1, x->sector, !x->write);
		}
		break;
	case A_COMPLETE: {
		size_t paired = 0;
		for (size_t j = 0; j < g->nout && !c->oom; j++) {
			x = &g->done[j];
			if (x->q == NONE)
				return;   /* queued before the capture (or before this device's first Q) */
			paired++;
			emit(c, d->dm ? K_Q2C_DM : K_Q2C, di, x->proc, x->q, tdelta(x->q, t), x->sector, !x->write);
			if (x->d != NONE)
				emit(c, K_D2C, di, x->proc, t, tdelta(x->d, t), x->sector, !x->write);
			if (c->io_on)
				emit_io(c, x, di, ord, t, 0);
			/* an I/O ioscope completes here that btt's view does not complete with this C */
			if (c->btt_on && !btt_completed(c, x->q, x->sector)) {
				if (x->piece) d->btt_diff_split++;
				else if (d->nstale && in_stale(d, x->sector, bio_end(x))) d->btt_diff_range++;
				else d->btt_diff_other++;
			}
		}
		if (!paired && c->io_on)
			emit_io_start(c, di, ord, t, sec, e);
		break;
	}
	}
}

/*
 * feed(events, *, dev, auxdev, proc, bdev=None, name=None) -> tuple: bytes of records per kind
 *
 * events: EVENT records in the order read; dev (int32): each one's device (dense index; -1 to skip it),
 * auxdev: a remap's device_from, proc: its process (ioscope's naming); for btt's view, bdev: the
 * record's own device (default dev: they differ for a remap recorded on the traced disk whose bio went
 * to another), name: a process note's name id (-1 or None: none). Process notes and messages
 * (flags) are btt's only.
 */
static PyObject *Core_feed(Core *c, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"events", "dev", "auxdev", "proc", "bdev", "name", NULL};
	PyObject *oev, *o[5] = {NULL, NULL, NULL, Py_None, Py_None};
	static const char *names[5] = {"dev", "auxdev", "proc", "bdev", "name"};
	Py_buffer bev, b[5];
	int have[5] = {0}, have_ev = 0;
	Py_ssize_t n;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OOOOO", kwlist, &oev, &o[0], &o[1], &o[2], &o[3], &o[4]))
		return NULL;
	for (int i = 0; i < 3; i++)
		if (!o[i]) {
			PyErr_Format(PyExc_TypeError, "feed() needs the keyword argument %s", names[i]);
			return NULL;
		}
	if (c->btt_on && bs_begin(&c->sim) < 0)
		return PyErr_NoMemory();
	if (tc_get_events(oev, &bev, &n) < 0)
		return NULL;
	have_ev = 1;
	for (int i = 0; i < 5; i++) {
		if (o[i] == Py_None)
			continue;
		if (tc_get_buf(o[i], &b[i], 4, n, names[i]) < 0)
			goto fail;
		have[i] = 1;
	}
	const event_t *ev = bev.buf;
	const int32_t *devi = b[0].buf, *auxdev = b[1].buf, *proc = b[2].buf;
	const int32_t *bdev = have[3] ? b[3].buf : devi, *name = have[4] ? b[4].buf : NULL;
	int32_t maxdev = -1, maxproc = -1;

	for (Py_ssize_t k = 0; k < n; k++) {
		if (devi[k] > maxdev) maxdev = devi[k];
		if (auxdev[k] > maxdev) maxdev = auxdev[k];
		if (bdev[k] > maxdev) maxdev = bdev[k];
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
	bioeng_t *g = &c->eng;
	for (Py_ssize_t k = 0; k < n && !c->oom && !g->oom; k++) {
		const event_t *E = &ev[k];
		uint64_t t = E->ts, sec = E->sector, e = sec + (E->bytes >> 9);
		int a = E->action;
		int32_t di = devi[k];
		int blk = di >= 0 && !(E->flags & (EV_NOTE_PROCESS | EV_MESSAGE));
		int overlap = 0;
		/* a Q's bio already queued at its sector: a duplicate, not an overlap (btt's view replaces it) */
		bio_t *old = blk && a == A_QUEUE && E->bytes ? be_find(g, (uint32_t)di, sec) : NULL;

		if (c->btt_on) {   /* btt's view first: the comparisons below read what it did */
			bs_ev_t be = {t - c->tz, sec, E->aux, E->bytes, E->pid, E->category, bdev[k], auxdev[k],
				      a == A_REMAP ? di : -1, a, name ? name[k] : -1};
			if (E->flags & EV_NOTE_PROCESS) {
				be.action = BS_NOTE;
			} else if (E->flags & EV_MESSAGE) {
				be.action = BS_MESSAGE;
			}
			if (old == NULL && blk && a == A_QUEUE && E->bytes &&
			    (overlap = btt_overlaps(c, bdev[k], sec, e)) < 0) {
				c->oom = 1;
				break;
			}
			c->sim.g_node = -1;
			c->sim.ndone = 0;
			c->sim.cur_ord = (int64_t)k;
			if (bs_event(&c->sim, &be) < 0) {
				c->oom = 1;
				break;
			}
		}
		if (blk)
			ioscope_event(c, E, c->nfed + (uint64_t)k, di, auxdev[k], proc[k], overlap, old);
	}
	if (g->oom)
		c->oom = 1;
	c->nfed += (uint64_t)n;
	Py_END_ALLOW_THREADS

	if (have_ev)
		PyBuffer_Release(&bev);
	for (int i = 0; i < 5; i++)
		if (have[i])
			PyBuffer_Release(&b[i]);
	if (c->oom || (c->btt_on && bs_end(&c->sim) < 0))
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
	if (have_ev)
		PyBuffer_Release(&bev);
	for (int i = 0; i < 5; i++)
		if (have[i])
			PyBuffer_Release(&b[i]);
	return NULL;
}

static PyObject *Core_set_remapper(Core *c, PyObject *args)
{
	int idx, dm;
	if (!PyArg_ParseTuple(args, "ip", &idx, &dm))
		return NULL;
	/* ensure_dev may move the devices the seek workers are inserting into */
	if ((c->btt_on && bs_begin(&c->sim) < 0) || idx < 0 || ensure_dev(c, (size_t)idx) < 0)
		return PyErr_NoMemory();
	c->devs[idx].dm = dm;
	if (c->btt_on)
		c->sim.devs[idx].dm = dm;
	Py_RETURN_NONE;
}

#define SET_U64(dict, name, val) do { \
		PyObject *v_ = PyLong_FromUnsignedLongLong((unsigned long long)(val)); \
		if (!v_ || PyDict_SetItemString(dict, name, v_) < 0) { Py_XDECREF(v_); goto err; } \
		Py_DECREF(v_); \
	} while (0)

/* ioscope's per-device counters, in allocation order */
static PyObject *Core_devices(Core *c, PyObject *unused)
{
	PyObject *list = PyList_New(0), *dct = NULL;
	if (!list)
		return NULL;
	for (size_t k = 0; k < c->norder; k++) {
		int32_t idx = c->order[k];
		dev_t_ *d = &c->devs[idx];
		uint64_t inflight = 0, issued = 0;   /* bios queued in view and not completed */
		for (size_t i = 0; i < c->eng.npool; i++) {
			const bio_t *x = &c->eng.pool[i];
			if (x->used && !x->noq && bio_dev(c, x) == idx) {
				inflight++;
				issued += x->d != NONE;
			}
		}
		dct = PyDict_New();
		if (!dct)
			goto err;
		SET_U64(dct, "idx", idx);
		SET_U64(dct, "start_time", d->start_time);
		SET_U64(dct, "end_time", d->end_time);
		SET_U64(dct, "dup_q", d->dup_q);
		SET_U64(dct, "culled", d->culled);
		SET_U64(dct, "overlap_q", d->overlap_q);
		SET_U64(dct, "split_pieces", d->split_pieces);
		SET_U64(dct, "split_bios", d->split_bios);
		SET_U64(dct, "btt_diff_split", d->btt_diff_split);
		SET_U64(dct, "btt_diff_range", d->btt_diff_range);
		SET_U64(dct, "btt_diff_other", d->btt_diff_other);
		SET_U64(dct, "btt_g_split", d->btt_g_split);
		SET_U64(dct, "btt_g_range", d->btt_g_range);
		SET_U64(dct, "btt_g_other", d->btt_g_other);
		SET_U64(dct, "inflight", inflight);
		SET_U64(dct, "inflight_issued", issued);
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

/* btt's view: everything btt -A prints (bttsim.c's bs_result) */
static PyObject *Core_btt(Core *c, PyObject *unused)
{
	if (!c->btt_on) {
		PyErr_SetString(PyExc_RuntimeError, "btt's view is off (set_btt(False))");
		return NULL;
	}
	if (bs_begin(&c->sim) < 0)
		return PyErr_NoMemory();
	bs_fold_live(&c->sim, NONE);
	return bs_result(&c->sim);
}

static PyObject *Core_set_seeks(Core *c, PyObject *args)
{
	int on;
	if (!PyArg_ParseTuple(args, "p", &on))
		return NULL;
	c->sim.no_seeks = !on;
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

static PyObject *Core_set_btt_latencies(Core *c, PyObject *args)
{
	int on;
	if (!PyArg_ParseTuple(args, "p", &on))
		return NULL;
	c->sim.lat_on = on;
	Py_RETURN_NONE;
}

static PyObject *Core_set_btt_files(Core *c, PyObject *args)
{
	int on;
	double delta = 0.1;
	if (!PyArg_ParseTuple(args, "p|d", &on, &delta))
		return NULL;
	c->sim.files_on = on;
	c->sim.range_delta = delta;
	Py_RETURN_NONE;
}

/* btt's -Q, -s, -m, -B, -p, -P, -L: the rows of its queue-depth, seek, seeks-per-second, block-number, per-I/O,
 * per-I/O times and periodic latency files (-L: its period in seconds, 0 or less for none) */
static PyObject *Core_set_btt_extra(Core *c, PyObject *args)
{
	int aqd, seek, sps, bno, pio = 0, pit = 0;
	double plat = 0.0;
	if (!PyArg_ParseTuple(args, "pppp|ppd", &aqd, &seek, &sps, &bno, &pio, &pit, &plat))
		return NULL;
	c->sim.plat_freq = plat;
	c->sim.pio_on = pio;
	c->sim.pit_on = pit;
	c->sim.aqd_on = aqd;
	c->sim.seek_on = seek;
	c->sim.sps_on = sps;
	c->sim.bno_on = bno;
	Py_RETURN_NONE;
}

/* btt's -I, -S: the rows of its iostat file, an interval of seconds */
static PyObject *Core_set_btt_iostat(Core *c, PyObject *args)
{
	int on;
	unsigned long long interval;
	if (!PyArg_ParseTuple(args, "pK", &on, &interval))
		return NULL;
	c->sim.iostat_on = on;
	c->sim.iostat_interval = interval * 1000000000ULL;
	Py_RETURN_NONE;
}

/* btt's -t/-T: the records btt reads (bttsim.h) */
static PyObject *Core_set_btt_window(Core *c, PyObject *args)
{
	double t0, t1;
	if (!PyArg_ParseTuple(args, "dd", &t0, &t1))
		return NULL;
	c->sim.time_bounded = 1;
	c->sim.t_start = t0;
	c->sim.t_end = t1;
	Py_RETURN_NONE;
}

/* the rows of btt's files since the last take (bttsim.h's blat_t) */
static PyObject *Core_take_btt_latencies(Core *c, PyObject *unused)
{
	PyObject *b = PyBytes_FromStringAndSize((const char *)c->sim.lat, (Py_ssize_t)(c->sim.nlat * sizeof(blat_t)));
	c->sim.nlat = 0;
	return b;
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
	for (size_t i = 0; i < c->eng.npool; i++) {
		const bio_t *x = &c->eng.pool[i];
		if (x->used && !x->noq && x->ord < best)
			best = x->ord;
	}
	if (best == NONE)
		return PyLong_FromLong(-1);
	return PyLong_FromUnsignedLongLong(best);
}

/* io_flush's order: the devices' allocation order, then start sector, then Q */
typedef struct {
	const Core *c;
	const int32_t *rank;
} flush_order_t;

static int by_dev_sector(const void *pa, const void *pb, void *arg)
{
	const flush_order_t *o = arg;
	const bio_t *a = *(const bio_t *const *)pa, *b = *(const bio_t *const *)pb;
	int32_t ra = o->rank[bio_dev(o->c, a)], rb = o->rank[bio_dev(o->c, b)];
	if (ra != rb)
		return ra < rb ? -1 : 1;
	if (a->sector != b->sector)
		return a->sector < b->sector ? -1 : 1;
	return a->ord < b->ord ? -1 : a->ord > b->ord;
}

/* records for every I/O still in flight (IO_END), in device order; take them with take_io() */
static PyObject *Core_io_flush(Core *c, PyObject *unused)
{
	size_t n = 0;
	const bio_t **live = malloc((c->eng.npool + 1) * sizeof(*live));
	int32_t *rank = malloc((c->ndevs + 1) * sizeof(*rank));
	if (!live || !rank) {
		free(live);
		free(rank);
		return PyErr_NoMemory();
	}
	for (size_t k = 0; k < c->norder; k++)
		rank[c->order[k]] = (int32_t)k;
	for (size_t i = 0; i < c->eng.npool; i++) {
		const bio_t *x = &c->eng.pool[i];
		if (x->used && !x->noq)
			live[n++] = x;
	}
	flush_order_t order = {c, rank};
	qsort_r(live, n, sizeof(*live), by_dev_sector, &order);
	c->nio = 0;
	for (size_t i = 0; i < n && !c->oom; i++)
		emit_io(c, live[i], bio_dev(c, live[i]), NONE, NONE, IO_END);
	free(live);
	free(rank);
	if (c->oom)
		return PyErr_NoMemory();
	Py_RETURN_NONE;
}

static void Core_dealloc(Core *c)
{
	bs_free(&c->sim);
	be_free(&c->eng);
	for (size_t i = 0; i < c->ndevs; i++)
		free(c->devs[i].stale);
	free(c->devs);
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
		c->btt_on = 1;
		bs_init(&c->sim);
		be_init(&c->eng);
		c->eng.keep_done = 1;
		c->eng.stages = 1;
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

static PyObject *Core_set_btt(Core *c, PyObject *args)
{
	int on;
	if (!PyArg_ParseTuple(args, "p", &on))
		return NULL;
	if (c->nfed) {
		PyErr_SetString(PyExc_RuntimeError, "set_btt() goes before the first feed()");
		return NULL;
	}
	c->btt_on = on;
	Py_RETURN_NONE;
}

static PyMethodDef Core_methods[] = {
	{"set_time_zero", (PyCFunction)Core_set_time_zero, METH_VARARGS,
	 "set_time_zero(ns): the time btt's view counts from (0 in a blktrace dump), before the first feed"},
	{"feed", (PyCFunction)(void (*)(void))Core_feed, METH_VARARGS | METH_KEYWORDS,
	 "feed(events, *, dev, auxdev, proc, bdev=None, name=None) -> tuple: bytes of records per kind"},
	{"set_remapper", (PyCFunction)Core_set_remapper, METH_VARARGS, "set_remapper(dev_idx, flag)"},
	{"devices", (PyCFunction)Core_devices, METH_NOARGS, "ioscope's per-device counters, in allocation order"},
	{"btt", (PyCFunction)Core_btt, METH_NOARGS, "btt's view: what btt -A prints (devices, processes, all)"},
	{"set_io_records", (PyCFunction)Core_set_io_records, METH_VARARGS,
	 "set_io_records(flag): emit one record per I/O (take_io), before the first feed"},
	{"set_seeks", (PyCFunction)Core_set_seeks, METH_VARARGS,
	 "set_seeks(flag): build btt's seek trees (default True), before the first feed"},
	{"set_btt", (PyCFunction)Core_set_btt, METH_VARARGS,
	 "set_btt(flag): keep btt's view (default True), before the first feed"},
	{"set_btt_latencies", (PyCFunction)Core_set_btt_latencies, METH_VARARGS,
	 "set_btt_latencies(flag): keep the rows of btt's -z/-l/-q files (take_btt_latencies)"},
	{"set_btt_files", (PyCFunction)Core_set_btt_files, METH_VARARGS,
	 "set_btt_files(flag, range_delta=0.1): keep the rows of btt's messages and per-second files (take_btt_latencies)"},
	{"set_btt_extra", (PyCFunction)Core_set_btt_extra, METH_VARARGS,
	 "set_btt_extra(aqd, seeks, sps, bno, per_io=False, per_io_times=False, plat_freq=0.0): keep the rows of "
	 "btt's -Q, -s, -m, -B, -p, -P and -L files (take_btt_latencies)"},
	{"set_btt_iostat", (PyCFunction)Core_set_btt_iostat, METH_VARARGS,
	 "set_btt_iostat(on, interval): keep the rows of btt's -I file, its intervals -S seconds long"},
	{"set_btt_window", (PyCFunction)Core_set_btt_window, METH_VARARGS,
	 "set_btt_window(t_start, t_end): btt's -t/-T (seconds; btt's default for the one not given is 0.0)"},
	{"take_btt_latencies", (PyCFunction)Core_take_btt_latencies, METH_NOARGS,
	 "bytes of the rows of btt's files since the last take: (kind i4, dev i4, t u8, v u8, w u8) each"},
	{"take_io", (PyCFunction)Core_take_io, METH_NOARGS, "bytes of the per-I/O records of the last feed or flush"},
	{"io_flush", (PyCFunction)Core_io_flush, METH_NOARGS, "per-I/O records of the I/Os still in flight"},
	{"min_ord", (PyCFunction)Core_min_ord, METH_NOARGS, "smallest Q ordinal in flight, or -1"},
	{NULL}
};

PyTypeObject tc_CoreType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ioscope.capture._tracecore.Core",
	.tp_basicsize = sizeof(Core),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = Core_new,
	.tp_dealloc = (destructor)Core_dealloc,
	.tp_methods = Core_methods,
	.tp_doc = "report's pairing of block events: ioscope's view (the pairing engine) and btt's view of the same events",
};

int tc_module_sizes(PyObject *m)
{
	if (PyModule_AddIntConstant(m, "REC_SIZE", (long)sizeof(rec_t)) < 0)
		return -1;
	if (PyModule_AddIntConstant(m, "BLAT_SIZE", (long)sizeof(blat_t)) < 0)
		return -1;
	return PyModule_AddIntConstant(m, "IOREC_SIZE", (long)sizeof(iorec_t));
}
