/*
 * Core: ioscope's pairing of block events (each split piece its own I/O, remaps on the device they went
 * to), with btt's view (bttsim.c) fed from the same loop so that report can say which I/Os btt pairs
 * otherwise, and why.
 *
 * Pairing Q/G/I/M/D/C events is inherently sequential (each event changes which I/Os are in flight),
 * so it runs here, one pass over each chunk of events; everything else (statistics, histograms,
 * percentiles, active periods) is done with numpy in btt.py from the records this emits.
 *
 * Rules (see btt.py for the list): in-flight Qs per device are kept sorted by start sector, one per
 * start sector; G/I/M/S apply to the Q whose range holds their sector; D and C to every Q whose range
 * lies inside theirs; X splits the Q it hits: each piece is paired on its own, with the bio's Q time.
 *
 * Input per chunk: EVENT records and per-event dense indexes (feed()'s doc). Output: bytes of rec_t
 * records, one bytes object per kind; per-device counters via devices(); btt's results via btt().
 */
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

typedef struct {
	int alloc, culling, dm;
	uint64_t start_time, end_time;
	qrec_t *q;
	size_t nq, capq;
	uint64_t last_q;
	uint64_t culled, dup_q, overlap_q;
	/* split bios: pieces made (each paired on its own, with the bio's Q time); the ranges btt
	 * keeps as one I/O no piece completes, and the later Qs inside one (btt may pair them with it) */
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

static void emit_io(Core *c, const qrec_t *q, int32_t dev, uint64_t ord_c, uint64_t tc, uint32_t flags)
{
	if (tc_room(&c->io, &c->capio, c->nio, sizeof(*c->io), 4096) < 0) {
		c->oom = 1;
		return;
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
	return tc_room(&d->q, &d->capq, d->nq, sizeof(*d->q), 64);
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

static qrec_t *find_sec(dev_t_ *d, uint64_t sec)
{
	size_t i = lower(d, sec + 1);  /* first start > sec */
	if (i == 0)
		return NULL;
	qrec_t *q = &d->q[i - 1];
	return sec < q->e ? q : NULL;
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
	size_t *hits = NULL;
	size_t caphits = 0;
	for (Py_ssize_t k = 0; k < n && !c->oom; k++) {
		const event_t *E = &ev[k];
		uint64_t t = E->ts, sec = E->sector;
		int a = E->action;
		int32_t di = devi[k];
		int rdk = (E->category & TC_READ_) != 0;
		dev_t_ *d;

		if (c->btt_on) {   /* btt's view first: the comparisons below read what it did */
			bs_ev_t be = {t - c->tz, sec, E->aux, E->bytes, E->pid, E->category, bdev[k], auxdev[k],
				      a == A_REMAP ? di : -1, a, name ? name[k] : -1};
			if (E->flags & EV_NOTE_PROCESS) {
				be.action = BS_NOTE;
			} else if (E->flags & EV_MESSAGE) {
				be.action = BS_MESSAGE;
			}
			c->sim.g_node = -1;
			c->sim.ndone = 0;
			if (bs_event(&c->sim, &be) < 0) {
				c->oom = 1;
				break;
			}
		}
		if (di < 0 || (E->flags & (EV_NOTE_PROCESS | EV_MESSAGE)))
			continue;
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
			uint64_t rest = E->aux;
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
		if (E->bytes == 0 && a != A_REQUEUE && a != A_REMAP)
			continue;
		d = setup_dev(c, di, t);
		if (d->culling) {
			if (a == A_QUEUE || a == A_REMAP) {
				d->culling = 0;
			} else {
				d->culled++;
				if (a == A_COMPLETE && c->io_on)
					emit_io_start(c, di, c->nfed + (uint64_t)k, t, sec, sec + (E->bytes >> 9));
				continue;
			}
		}
		d->end_time = t;
		uint64_t e = sec + (E->bytes >> 9);
		qrec_t *q;

		switch (a) {
		case A_QUEUE: {
			size_t i = lower(d, sec);
			/* A Q at the start sector of one in flight takes its place (btt tracks one I/O per
			 * start sector, and the newer wins); the older is never completed: counted here. */
			int replace = i < d->nq && d->q[i].s == sec;
			int32_t p = proc[k];
			int kind = d->dm ? K_Q2Q_DM : K_Q2Q;
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
			q->rd = rdk;
			q->split = 0;
			q->rq = 0;
			q->ord = c->nfed + (uint64_t)k;
			break;
		}
		case A_GETRQ:
			q = find_sec(d, sec);
			if (q) {
				int32_t b = c->sim.g_node;
				if (c->btt_on && (b < 0 || c->sim.qt.n[b].t != q->t - c->tz || c->sim.qt.n[b].s != q->s)) {
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
			break;
		case A_REQUEUE:
			if (c->io_on && (q = find_sec(d, sec)) != NULL)
				q->rq++;
			break;
		case A_REMAP: {
			int32_t si = auxdev[k];
			if (si >= 0 && c->devs[si].alloc) {
				q = find_sec(&c->devs[si], E->aux);
				if (q)
					emit(c, c->devs[si].dm ? K_Q2A_DM : K_Q2A, si, q->proc, t, tdelta(q->t, t), q->s, q->rd);
			}
			break;
		}
		case A_ISSUE: {
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
			}
			break;
		}
		case A_COMPLETE: {
			size_t nh = 0;
			for (size_t i = lower(d, sec); i < d->nq && d->q[i].s < e; i++) {
				q = &d->q[i];
				if (q->e > e)
					continue;
				emit(c, d->dm ? K_Q2C_DM : K_Q2C, di, q->proc, q->t, tdelta(q->t, t), q->s, q->rd);
				if (q->d != NONE)
					emit(c, K_D2C, di, q->proc, t, tdelta(q->d, t), q->s, q->rd);
				if (c->io_on)
					emit_io(c, q, di, c->nfed + (uint64_t)k, t, 0);
				if (tc_room(&hits, &caphits, nh, sizeof(*hits), 64) < 0) {
					c->oom = 1;
					break;
				}
				hits[nh++] = i;
			}
			if (!nh && c->io_on)
				emit_io_start(c, di, c->nfed + (uint64_t)k, t, sec, e);
			/* the I/Os ioscope completes here that btt's view does not complete with this C */
			for (size_t h = 0; c->btt_on && !c->oom && h < nh; h++) {
				qrec_t *a = &d->q[hits[h]];
				if (btt_completed(c, a->t, a->s))
					continue;
				if (a->split) d->btt_diff_split++;
				else if (d->nstale && in_stale(d, a->s, a->e)) d->btt_diff_range++;
				else d->btt_diff_other++;
			}
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
		SET_U64(dct, "inflight", d->nq);
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
	bs_free(&c->sim);
	for (size_t i = 0; i < c->ndevs; i++) {
		free(c->devs[i].q);
		free(c->devs[i].stale);
	}
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
	.tp_doc = "ioscope's pairing of block events, and btt's view of the same events",
};

int tc_module_sizes(PyObject *m)
{
	if (PyModule_AddIntConstant(m, "REC_SIZE", (long)sizeof(rec_t)) < 0)
		return -1;
	return PyModule_AddIntConstant(m, "IOREC_SIZE", (long)sizeof(iorec_t));
}
