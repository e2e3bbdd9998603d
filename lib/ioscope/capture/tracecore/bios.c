/*
 * Bios: ioscope's pairing engine (bios.h says who uses it) and its Python face, the Bios object: one
 * record per completed bio (and flush request), for agg -r and snoop (engines/pairing/bios.py lists the
 * rules).
 */
#include "bios.h"

typedef struct {
	PyObject_HEAD
	bioeng_t e;
} Bios;

void be_init(bioeng_t *b)
{
	memset(b, 0, sizeof(*b));
	b->freelist = -1;
}

void be_free(bioeng_t *b)
{
	for (size_t i = 0; i < b->ndevs; i++)
		free(b->devs[i].fl);
	free(b->devs);
	free(b->pool);
	free(b->heads);
	free(b->out);
	free(b->done);
	free(b->chain);
	be_init(b);
}

static size_t hslot(const bioeng_t *b, int32_t dev, uint64_t sector)
{
	uint64_t h = (sector * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)dev * 0xC2B2AE3D27D4EB4FULL);
	return (size_t)(h >> 20) & (b->nheads - 1);
}

/* the device's state, added on first sight */
static biodev_t *bdev(bioeng_t *b, uint32_t dev, int32_t *idx)
{
	if (b->lastdev < b->ndevs && b->devs[b->lastdev].dev == dev) {
		*idx = (int32_t)b->lastdev;
		return &b->devs[b->lastdev];
	}
	for (size_t i = 0; i < b->ndevs; i++)
		if (b->devs[i].dev == dev) {
			b->lastdev = i;
			*idx = (int32_t)i;
			return &b->devs[i];
		}
	if (tc_room(&b->devs, &b->capdevs, b->ndevs, sizeof(*b->devs), 8) < 0)
		return NULL;
	biodev_t *d = &b->devs[b->ndevs];
	memset(d, 0, sizeof(*d));
	d->dev = dev;
	d->machine = -1;
	b->lastdev = b->ndevs;
	*idx = (int32_t)b->ndevs++;
	return d;
}

/* Bios kept in the order they were put, per hash bucket: put appends at the bucket's tail. */
static bio_t *put(bioeng_t *b, const bio_t *src)
{
	int32_t i;
	if (b->freelist >= 0) {
		i = b->freelist;
		b->freelist = b->pool[i].next;
	} else {
		if (tc_room(&b->pool, &b->cappool, b->npool, sizeof(*b->pool), 256) < 0)
			return NULL;
		i = (int32_t)b->npool++;
	}
	if (b->live + 1 > b->nheads) {   /* grow the table; chains rebuilt in their old order */
		size_t n = b->nheads ? b->nheads * 4 : 1024;
		int32_t *old = b->heads;
		size_t nold = b->nheads;
		int32_t *h = malloc(n * sizeof(*h)), *tail = malloc(n * sizeof(*tail));
		if (!h || !tail) {
			free(h);
			free(tail);
			return NULL;
		}
		for (size_t k = 0; k < n; k++)
			h[k] = tail[k] = -1;
		b->heads = h;
		b->nheads = n;
		for (size_t k = 0; k < nold; k++)
			for (int32_t j = old[k], nx; j >= 0; j = nx) {
				nx = b->pool[j].next;
				size_t s = hslot(b, b->pool[j].dev, b->pool[j].sector);
				b->pool[j].next = -1;
				if (tail[s] < 0)
					h[s] = j;
				else
					b->pool[tail[s]].next = j;
				tail[s] = j;
			}
		free(old);
		free(tail);
	}
	bio_t *x = &b->pool[i];
	*x = *src;
	x->next = -1;
	x->used = 1;
	size_t s = hslot(b, x->dev, x->sector);
	int32_t *link = &b->heads[s];
	while (*link >= 0)
		link = &b->pool[*link].next;
	*link = i;
	b->live++;
	return x;
}

static void drop(bioeng_t *b, bio_t *x)
{
	int32_t i = (int32_t)(x - b->pool);
	size_t s = hslot(b, x->dev, x->sector);
	for (int32_t *link = &b->heads[s]; *link >= 0; link = &b->pool[*link].next)
		if (*link == i) {
			*link = x->next;
			break;
		}
	x->used = 0;
	x->next = b->freelist;
	b->freelist = i;
	b->live--;
}

/* the oldest (or newest) bio in flight at sector; issued, write: -1 any, else 0 / 1 */
static bio_t *get(bioeng_t *b, int32_t dev, uint64_t sector, int issued, int newest, int write)
{
	if (!b->nheads)
		return NULL;
	bio_t *found = NULL;
	for (int32_t j = b->heads[hslot(b, dev, sector)]; j >= 0; j = b->pool[j].next) {
		bio_t *x = &b->pool[j];
		if (x->dev != dev || x->sector != sector)
			continue;
		if (issued >= 0 && (x->d != NONE) != issued)
			continue;
		if (write >= 0 && x->write != write)
			continue;
		found = x;
		if (!newest)
			break;
	}
	return found;
}

/* the bios making up the request [sector, sector + nbytes) of one direction (agg's rule, bios.py). Each
 * step moves past the bio found, so the walk ends: a bio of less than a sector (its end is its start) is
 * the chain's last, and so is one whose end would pass 2^64 (a file's sector, not a disk's). */
static size_t chain(bioeng_t *b, int32_t dev, uint64_t sector, uint32_t nbytes, int issued, int write)
{
	size_t n = 0;
	uint64_t len = nbytes >> 9, s = sector;
	uint64_t end = sector > UINT64_MAX - len ? UINT64_MAX : sector + len;
	while (s < end) {
		bio_t *x = get(b, dev, s, issued, issued, write);
		if (!x && issued)
			x = get(b, dev, s, -1, 0, write);
		if (!x || !x->nbytes)
			break;
		if (tc_room(&b->chain, &b->capchain, n, sizeof(*b->chain), 16) < 0) {
			b->oom = 1;
			return 0;
		}
		b->chain[n++] = x;
		uint64_t step = x->nbytes >> 9;
		if (!step || s > UINT64_MAX - step)
			break;
		s += step;
	}
	return n;
}

/* a new record, zeroed; with keep_done, its bio (done[] at the same index) is set by the caller */
static biorec_t *emit(bioeng_t *b, const bio_t *x)
{
	if (tc_room(&b->out, &b->capout, b->nout, sizeof(*b->out), 1024) < 0 ||
	    (b->keep_done && tc_room(&b->done, &b->capdone, b->nout, sizeof(*b->done), 1024) < 0)) {
		b->oom = 1;
		return NULL;
	}
	if (b->keep_done) {
		bio_t none = {.q = NONE, .d = NONE, .g = NONE, .i = NONE, .m = NONE, .ord = NONE, .seek = -1,
			      .inflight = -1, .dev = -1, .proc = -1, .noq = 1};
		b->done[b->nout] = x ? *x : none;
	}
	biorec_t *r = &b->out[b->nout++];
	memset(r, 0, sizeof(*r));
	return r;
}

/* room for n bios in chain; -1 when out of memory */
static int chain_room(bioeng_t *b, size_t n)
{
	if (tc_room(&b->chain, &b->capchain, n ? n - 1 : 0, sizeof(*b->chain), 16) < 0) {
		b->oom = 1;
		return -1;
	}
	return 0;
}

/* the oldest bio with data at sector issued (or not) */
static bio_t *staged(bioeng_t *b, int32_t dev, uint64_t sector, int issued)
{
	if (!b->nheads)
		return NULL;
	for (int32_t j = b->heads[hslot(b, dev, sector)]; j >= 0; j = b->pool[j].next) {
		bio_t *x = &b->pool[j];
		if (x->dev == dev && x->sector == sector && x->nbytes && (x->d != NONE) == issued)
			return x;
	}
	return NULL;
}

/* The bio a G, S, I or M at sector is for: the oldest there not yet issued, else the oldest issued that has
 * not had one (field: its time of that event, NONE or 0 while it has not). A requeued request's second
 * I (and G) stays the request's: the bio keeps its first. */
static bio_t *stage(bioeng_t *b, int32_t dev, uint64_t sector, size_t field)
{
	bio_t *x = staged(b, dev, sector, 0);
	if (x)
		return x;
	x = staged(b, dev, sector, 1);
	if (!x)
		return NULL;
	uint64_t v = *(const uint64_t *)((const char *)x + field);
	return v == NONE || v == 0 ? x : NULL;
}

static void on_queue(bioeng_t *b, const event_t *E, biodev_t *d, int32_t di, int32_t proc, uint64_t ord)
{
	uint32_t nb = E->bytes;
	if (!nb && !(E->category & TC_FLUSH_))
		return;
	if (nb && b->nheads)   /* a split's remainder queued again keeps its first queue time */
		for (int32_t j = b->heads[hslot(b, di, E->sector)]; j >= 0; j = b->pool[j].next) {
			bio_t *o = &b->pool[j];
			if (o->dev == di && o->sector == E->sector && o->split && o->d == NONE && o->nbytes == nb) {
				o->split = 0;
				return;
			}
		}
	bio_t x = {.sector = E->sector, .q = E->ts, .d = NONE, .g = NONE, .i = NONE, .m = NONE, .ord = ord,
		   .inflight = -1, .dev = di, .proc = proc, .nbytes = nb, .pid = E->pid, .tgid = E->tgid, .cpu = E->cpu,
		   .write = (E->category & TC_WRITE_) != 0, .cgroup = (E->flags & EV_CGROUP) ? E->aux : 0};
	uint64_t dist = E->sector > d->last_end ? E->sector - d->last_end : d->last_end - E->sector;
	/* a distance of 2^63 sectors or more (only a file's numbers reach it) saturates: negative means none */
	x.seek = d->has_end ? (dist > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)dist) : -1;
	d->has_end = 1;
	d->last_end = E->sector + (nb >> 9);
	x.seq = !nb || (d->machine >= 0 && ((E->category & TC_FLUSH_) || ((E->category & TC_FUA_) && !d->machine)));
	bio_t *p = put(b, &x);
	if (!p || chain_room(b, 1) < 0) {
		b->oom = 1;
		return;
	}
	b->chain[0] = p;
	b->nchain = 1;
}

/* X: the bio queued at sector keeps [sector, rest); the rest is a piece of its own, with the bio's Q time
 * and details, and none of its stage times */
static void on_split(bioeng_t *b, const event_t *E, int32_t di)
{
	uint64_t sector = E->sector, rest = E->aux;
	bio_t *o = get(b, di, sector, 0, 0, -1);
	if (!o || !(sector < rest && rest < sector + (o->nbytes >> 9)))
		return;
	b->split_from = *o;
	bio_t front = *o, rem = *o;
	uint32_t fb = (uint32_t)((rest - sector) << 9);
	drop(b, o);
	front.nbytes = fb;
	front.split = 0;
	front.piece = 1;
	rem.sector = rest;
	rem.nbytes -= fb;
	rem.seek = -1;
	rem.split = 1;
	rem.piece = 1;
	rem.g = rem.i = rem.m = NONE;
	rem.sl = 0;
	bio_t *p = put(b, &front);
	int32_t fi = p ? (int32_t)(p - b->pool) : -1;
	if (!p || !(p = put(b, &rem)) || chain_room(b, 2) < 0) {
		b->oom = 1;
		return;
	}
	b->chain[0] = &b->pool[fi];   /* the pool may have moved */
	b->chain[1] = p;
	b->nchain = 2;
}

static void on_issue(bioeng_t *b, const event_t *E, biodev_t *d, int32_t di)
{
	if (!E->bytes) {
		if (E->category & TC_FLUSH_) {   /* a flush request of the block layer's own */
			if (tc_room(&d->fl, &d->capfl, d->nfl, 2 * sizeof(*d->fl), 8) < 0) {
				b->oom = 1;
				return;
			}
			d->fl[2 * d->nfl] = E->ts;
			d->fl[2 * d->nfl + 1] = (uint64_t)d->inflight;
			d->nfl++;
			d->inflight++;
		}
		return;
	}
	int w = (E->category & TC_WRITE_) != 0;
	size_t n = chain(b, di, E->sector, E->bytes, 0, w);
	if (!n) {
		if (chain(b, di, E->sector, E->bytes, 1, w))
			return;   /* a requeued request issued again: its first issue counts */
		/* issued without its Q in view (queued before the capture): kept for its completion */
		bio_t x = {.sector = E->sector, .q = NONE, .d = E->ts, .g = NONE, .i = NONE, .m = NONE, .ord = NONE,
			   .seek = -1, .inflight = -1, .dev = di, .proc = -1, .nbytes = E->bytes, .pid = E->pid,
			   .tgid = E->tgid, .cpu = E->cpu, .write = w, .noq = 1};
		if (!b->oom && !put(b, &x))
			b->oom = 1;
		return;
	}
	if (b->chain[0]->inflight < 0) {
		b->chain[0]->inflight = (int32_t)d->inflight;
		d->inflight++;
	}
	for (size_t i = 0; i < n; i++)   /* chain() gave bios not yet issued only */
		b->chain[i]->d = E->ts;
	b->nchain = n;
}

static void on_complete(bioeng_t *b, const event_t *E, biodev_t *d, int32_t di)
{
	uint64_t ts = E->ts;
	int w = (E->category & TC_WRITE_) != 0;
	size_t n;
	biorec_t *r;
	if (!E->bytes && (E->category & TC_FLUSH_)) {
		if (d->hfl < d->nfl) {
			uint64_t dn = d->fl[2 * d->hfl], before = d->fl[2 * d->hfl + 1];
			if (++d->hfl == d->nfl)
				d->hfl = d->nfl = 0;
			d->inflight = d->inflight > 0 ? d->inflight - 1 : 0;
			if ((r = emit(b, NULL)) != NULL) {
				r->c = ts; r->q = NONE; r->d = dn; r->sector = E->sector; r->seek = -1; r->dev = E->dev;
				r->pid = E->pid; r->tgid = E->tgid;   /* no Q: the context it completed in */
				r->inflight = (int32_t)before; r->category = E->category; r->error = E->error;
				r->flags = BR_FIRST | BR_FLUSH;
			}
		}
		return;
	}
	if (!E->bytes) {   /* the end of a flush-sequence write, or of an empty PREFLUSH write */
		bio_t *x = NULL;
		if (b->nheads)
			for (int32_t j = b->heads[hslot(b, di, E->sector)]; j >= 0; j = b->pool[j].next) {
				bio_t *o = &b->pool[j];
				if (o->dev == di && o->sector == E->sector && o->seq && o->write == w) {
					x = o;
					break;
				}
			}
		if (!x || chain_room(b, 1) < 0)
			return;
		b->chain[0] = x;
		n = 1;
	} else {
		n = chain(b, di, E->sector, E->bytes, 1, w);
		if (!n) {   /* queued and issued before the capture started */
			b->unpaired++;
			if ((r = emit(b, NULL)) != NULL) {
				r->c = ts; r->q = r->d = NONE; r->sector = E->sector; r->seek = -1; r->dev = E->dev;
				r->bytes = r->c_bytes = E->bytes; r->pid = E->pid; r->tgid = E->tgid; r->inflight = -1;
				r->cpu = E->cpu; r->category = E->category; r->error = E->error;
				r->flags = BR_FIRST | BR_UNPAIRED;
				if (b->keep_done) {
					b->done[b->nout - 1].sector = E->sector;
					b->done[b->nout - 1].nbytes = E->bytes;
				}
			}
			return;
		}
		if (b->chain[0]->seq)
			return;   /* the data step of a flush sequence: the write ends with its 0-byte completion */
	}
	bio_t *first = b->chain[0];
	if (first->noq)
		b->unpaired++;
	if (first->inflight >= 0)
		d->inflight = d->inflight > 0 ? d->inflight - 1 : 0;
	int32_t infl = first->inflight;
	for (size_t i = 0; i < n; i++) {
		bio_t x = *b->chain[i];
		drop(b, b->chain[i]);
		if ((r = emit(b, &x)) == NULL)
			return;
		uint64_t dn = x.d;
		if (i == 0 && dn == NONE && !x.nbytes && x.q != NONE)
			dn = x.g != NONE && x.g > x.q ? x.g : x.q;   /* as the kernel object: from when it became a request */
		r->c = ts; r->q = x.q; r->d = dn; r->sector = x.sector; r->seek = x.seek; r->dev = E->dev;
		r->bytes = x.nbytes; r->c_bytes = E->bytes; r->pid = x.pid; r->tgid = x.tgid; r->inflight = infl;
		r->cpu = x.cpu; r->category = E->category; r->error = E->error; r->cgroup = x.cgroup;
		r->flags = (uint16_t)((i == 0 ? BR_FIRST : 0) | (x.noq ? BR_UNPAIRED : 0));
	}
}

bio_t *be_find(bioeng_t *b, uint32_t key, uint64_t sector)
{
	int32_t di;
	for (size_t i = 0; i < b->ndevs; i++)
		if (b->devs[i].dev == key) {
			di = (int32_t)i;
			return get(b, di, sector, -1, 0, -1);
		}
	return NULL;
}

void be_event(bioeng_t *b, const event_t *E, uint32_t key, int32_t proc, uint64_t ord)
{
	int a = E->action;
	b->nchain = 0;
	b->last_ts = E->ts;
	if (E->flags & EV_NOTE_PROCESS)
		return;
	switch (a) {
	case A_QUEUE: case A_SPLIT: case A_ISSUE: case A_COMPLETE:
		break;
	case A_GETRQ:   /* an empty PREFLUSH write's G times its record; the rest only for Core */
		if (E->bytes && !b->stages)
			return;
		break;
	case A_SLEEPRQ: case A_INSERT: case A_BACKMERGE: case A_FRONTMERGE: case A_REQUEUE:
		if (!b->stages)
			return;
		break;
	default:
		return;
	}
	int32_t di;
	biodev_t *d = bdev(b, key, &di);
	if (!d) {
		b->oom = 1;
		return;
	}
	bio_t *x = NULL;
	switch (a) {
	case A_QUEUE:
		on_queue(b, E, d, di, proc, ord);
		return;
	case A_SPLIT:
		on_split(b, E, di);
		return;
	case A_ISSUE:
		on_issue(b, E, d, di);
		return;
	case A_COMPLETE:
		on_complete(b, E, d, di);
		return;
	case A_GETRQ:
		if (!E->bytes) {   /* an empty PREFLUSH write becomes a request: its issue time for the record */
			x = get(b, di, E->sector, 0, 0, -1);
			if (x && !x->nbytes && x->g == NONE)
				x->g = E->ts;
			return;
		}
		if ((x = stage(b, di, E->sector, offsetof(bio_t, g))) != NULL)
			x->g = E->ts;
		break;
	case A_SLEEPRQ:
		if (E->bytes && (x = stage(b, di, E->sector, offsetof(bio_t, sl))) != NULL)
			x->sl = E->ts;
		break;
	case A_INSERT:
		if (E->bytes && (x = stage(b, di, E->sector, offsetof(bio_t, i))) != NULL)
			x->i = E->ts;
		break;
	case A_BACKMERGE: case A_FRONTMERGE:
		if (E->bytes && (x = stage(b, di, E->sector, offsetof(bio_t, m))) != NULL)
			x->m = E->ts;
		break;
	case A_REQUEUE:
		if ((x = staged(b, di, E->sector, 1)) != NULL)
			x->rq++;
		break;
	}
	if (x && chain_room(b, 1) == 0) {
		b->chain[0] = x;
		b->nchain = 1;
	}
}

static PyObject *Bios_feed(Bios *o, PyObject *args)
{
	PyObject *oev;
	Py_buffer bev;
	Py_ssize_t n;
	bioeng_t *b = &o->e;
	if (!PyArg_ParseTuple(args, "O", &oev))
		return NULL;
	if (tc_get_events(oev, &bev, &n) < 0)
		return NULL;
	const event_t *ev = bev.buf;
	b->nout = 0;
	Py_BEGIN_ALLOW_THREADS
	for (Py_ssize_t k = 0; k < n && !b->oom; k++)
		be_event(b, &ev[k], ev[k].dev, -1, NONE);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&bev);
	if (b->oom)
		return PyErr_NoMemory();
	return PyBytes_FromStringAndSize((const char *)b->out, (Py_ssize_t)(b->nout * sizeof(biorec_t)));
}

static PyObject *Bios_set_machine(Bios *o, PyObject *args)
{
	unsigned int dev;
	int fua;
	if (!PyArg_ParseTuple(args, "Ip", &dev, &fua))
		return NULL;
	int32_t di;
	biodev_t *d = bdev(&o->e, dev, &di);
	if (!d)
		return PyErr_NoMemory();
	d->machine = fua;
	Py_RETURN_NONE;
}

/* drop the bios queued (or, without a Q, issued) before ts: merged away or their completion lost */
static PyObject *Bios_expire(Bios *o, PyObject *args)
{
	unsigned long long before;
	bioeng_t *b = &o->e;
	if (!PyArg_ParseTuple(args, "K", &before))
		return NULL;
	uint64_t n = 0;
	for (size_t i = 0; i < b->npool; i++) {
		bio_t *x = &b->pool[i];
		uint64_t t = x->q != NONE ? x->q : x->d;
		if (x->used && t < before) {
			drop(b, x);
			n++;
		}
	}
	return PyLong_FromUnsignedLongLong(n);
}

static PyObject *Bios_in_flight(Bios *o, PyObject *unused)
{
	return PyLong_FromSize_t(o->e.live);
}

/* requests issued and not completed on a disk, as the pairing counts them */
static PyObject *Bios_requests(Bios *o, PyObject *args)
{
	unsigned int dev;
	if (!PyArg_ParseTuple(args, "I", &dev))
		return NULL;
	for (size_t i = 0; i < o->e.ndevs; i++)
		if (o->e.devs[i].dev == dev)
			return PyLong_FromLongLong(o->e.devs[i].inflight);
	return PyLong_FromLong(0);
}

static PyObject *Bios_unpaired(Bios *o, void *unused)
{
	return PyLong_FromUnsignedLongLong(o->e.unpaired);
}

static PyObject *Bios_last_ts(Bios *o, void *unused)
{
	return PyLong_FromUnsignedLongLong(o->e.last_ts);
}

static void Bios_dealloc(Bios *o)
{
	be_free(&o->e);
	Py_TYPE(o)->tp_free((PyObject *)o);
}

static PyObject *Bios_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	Bios *o = (Bios *)type->tp_alloc(type, 0);
	if (o)
		be_init(&o->e);
	return (PyObject *)o;
}

static PyMethodDef Bios_methods[] = {
	{"feed", (PyCFunction)Bios_feed, METH_VARARGS,
	 "feed(events) -> bytes: one BIOREC per bio (or flush request, or unpaired completion) completed"},
	{"set_machine", (PyCFunction)Bios_set_machine, METH_VARARGS,
	 "set_machine(dev, fua): the disk has a write-back cache (writes with PREFLUSH go through the flush sequence)"},
	{"expire", (PyCFunction)Bios_expire, METH_VARARGS, "expire(before_ns) -> bios dropped"},
	{"in_flight", (PyCFunction)Bios_in_flight, METH_NOARGS, "bios in flight"},
	{"requests", (PyCFunction)Bios_requests, METH_VARARGS, "requests(dev) -> requests issued, not completed"},
	{NULL}
};

static PyGetSetDef Bios_getset[] = {
	{"unpaired", (getter)Bios_unpaired, NULL, "completions of I/O queued before the events began", NULL},
	{"last_ts", (getter)Bios_last_ts, NULL, "time of the last event fed", NULL},
	{NULL}
};

PyTypeObject tc_BiosType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ioscope.capture._tracecore.Bios",
	.tp_basicsize = sizeof(Bios),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = Bios_new,
	.tp_dealloc = (destructor)Bios_dealloc,
	.tp_methods = Bios_methods,
	.tp_getset = Bios_getset,
	.tp_doc = "ioscope's per-bio pairing (the kernel agg object's rules): one record per completed bio",
};

int tc_bios_sizes(PyObject *m)
{
	return PyModule_AddIntConstant(m, "BIOREC_SIZE", (long)sizeof(biorec_t));
}
