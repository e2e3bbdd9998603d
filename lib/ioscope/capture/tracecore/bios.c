/*
 * Bios: ioscope's per-bio pairing of Q/G/X/D/C events, the rules of the kernel's agg object
 * (bpf/agg.bpf.c over bpf/rqpath.bpf.h), one record per completed bio (and flush request), for agg -r
 * and snoop (engines/pairing/bios.py lists the rules).
 *
 * In-flight bios are kept per (device, start sector) in insertion order (two I/Os of one sector can be
 * in flight at once), in a chained hash table over a pool of bios.
 */
#include "tracecore.h"

enum { BR_FIRST = 1, BR_FLUSH = 2, BR_UNPAIRED = 4 };

typedef struct {
	uint64_t c, q, d, sector;     /* q, d: NONE where absent */
	int64_t seek;                 /* -1: none */
	uint32_t dev, bytes, c_bytes, pid, tgid;   /* bytes: the bio's; c_bytes: its completion's */
	int32_t inflight;             /* -1: none */
	uint16_t cpu, category, error, flags;
	uint64_t cgroup;              /* the id of the cgroup its Q names (EV_CGROUP), 0: none */
} biorec_t;

typedef struct {
	uint64_t sector, q, d, g, cgroup;
	int64_t seek;
	int32_t inflight, next, dev;  /* next: the next bio of the hash bucket (-1: none); dev: index */
	uint32_t nbytes, pid, tgid;
	uint16_t cpu;
	uint8_t seq, split, write, noq, used;
} bio_t;

typedef struct {
	uint32_t dev;
	int machine;                  /* -1: no flush sequence; 0: write-back without FUA; 1: with FUA */
	int has_end;
	uint64_t last_end;
	int64_t inflight;
	uint64_t *fl;                 /* pending flush requests: (issue time, in flight before) pairs, FIFO */
	size_t nfl, capfl, hfl;
} bdev_t;

typedef struct {
	PyObject_HEAD
	bio_t *pool;
	size_t npool, cappool;
	int32_t freelist;
	int32_t *heads;
	size_t nheads;                /* a power of two */
	size_t live;
	bdev_t *devs;
	size_t ndevs, capdevs, lastdev;
	biorec_t *out;
	size_t nout, capout;
	bio_t **chain;
	size_t capchain;
	uint64_t unpaired, last_ts;
	int oom;
} Bios;

static size_t hslot(const Bios *b, int32_t dev, uint64_t sector)
{
	uint64_t h = (sector * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)dev * 0xC2B2AE3D27D4EB4FULL);
	return (size_t)(h >> 20) & (b->nheads - 1);
}

/* the device's state, added on first sight */
static bdev_t *bdev(Bios *b, uint32_t dev, int32_t *idx)
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
	bdev_t *d = &b->devs[b->ndevs];
	memset(d, 0, sizeof(*d));
	d->dev = dev;
	d->machine = -1;
	b->lastdev = b->ndevs;
	*idx = (int32_t)b->ndevs++;
	return d;
}

/* Bios kept in the order they were put, per hash bucket: put appends at the bucket's tail. */
static bio_t *put(Bios *b, const bio_t *src)
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

static void drop(Bios *b, bio_t *x)
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
static bio_t *get(Bios *b, int32_t dev, uint64_t sector, int issued, int newest, int write)
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

/* the bios making up the request [sector, sector + nbytes) of one direction (agg's rule, bios.py) */
static size_t chain(Bios *b, int32_t dev, uint64_t sector, uint32_t nbytes, int issued, int write)
{
	size_t n = 0;
	uint64_t end = sector + (nbytes >> 9), s = sector;
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
		s += x->nbytes >> 9;
	}
	return n;
}

static biorec_t *emit(Bios *b)
{
	if (tc_room(&b->out, &b->capout, b->nout, sizeof(*b->out), 1024) < 0) {
		b->oom = 1;
		return NULL;
	}
	biorec_t *r = &b->out[b->nout++];
	memset(r, 0, sizeof(*r));
	return r;
}

static void on_queue(Bios *b, const event_t *E, bdev_t *d, int32_t di)
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
	bio_t x = {.sector = E->sector, .q = E->ts, .d = NONE, .g = NONE, .inflight = -1, .dev = di, .nbytes = nb,
		   .pid = E->pid, .tgid = E->tgid, .cpu = E->cpu, .write = (E->category & TC_WRITE_) != 0,
		   .cgroup = (E->flags & EV_CGROUP) ? E->aux : 0};
	x.seek = d->has_end ? (int64_t)(E->sector > d->last_end ? E->sector - d->last_end : d->last_end - E->sector) : -1;
	d->has_end = 1;
	d->last_end = E->sector + (nb >> 9);
	x.seq = !nb || (d->machine >= 0 && ((E->category & TC_FLUSH_) || ((E->category & TC_FUA_) && !d->machine)));
	if (!put(b, &x))
		b->oom = 1;
}

static void on_split(Bios *b, const event_t *E, int32_t di)
{
	uint64_t sector = E->sector, rest = E->aux;
	bio_t *o = get(b, di, sector, 0, 0, -1);
	if (!o || !(sector < rest && rest < sector + (o->nbytes >> 9)))
		return;
	bio_t front = *o, rem = *o;
	uint32_t fb = (uint32_t)((rest - sector) << 9);
	drop(b, o);
	front.nbytes = fb;
	front.split = 0;
	rem.sector = rest;
	rem.nbytes -= fb;
	rem.seek = -1;
	rem.split = 1;
	if (!put(b, &front) || !put(b, &rem))
		b->oom = 1;
}

static void on_issue(Bios *b, const event_t *E, bdev_t *d, int32_t di)
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
	if (!n) {   /* issued without its Q in view (queued before the capture): kept for its completion */
		bio_t x = {.sector = E->sector, .q = NONE, .d = E->ts, .g = NONE, .seek = -1, .inflight = -1, .dev = di,
			   .nbytes = E->bytes, .pid = E->pid, .tgid = E->tgid, .cpu = E->cpu, .write = w, .noq = 1};
		if (!b->oom && !put(b, &x))
			b->oom = 1;
		return;
	}
	if (b->chain[0]->inflight < 0) {
		b->chain[0]->inflight = (int32_t)d->inflight;
		d->inflight++;
	}
	for (size_t i = 0; i < n; i++)
		if (b->chain[i]->d == NONE)
			b->chain[i]->d = E->ts;
}

static void on_complete(Bios *b, const event_t *E, bdev_t *d, int32_t di)
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
			if ((r = emit(b)) != NULL) {
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
		if (!x)
			return;
		if (tc_room(&b->chain, &b->capchain, 0, sizeof(*b->chain), 16) < 0) {
			b->oom = 1;
			return;
		}
		b->chain[0] = x;
		n = 1;
	} else {
		n = chain(b, di, E->sector, E->bytes, 1, w);
		if (!n) {   /* queued and issued before the capture started */
			b->unpaired++;
			if ((r = emit(b)) != NULL) {
				r->c = ts; r->q = r->d = NONE; r->sector = E->sector; r->seek = -1; r->dev = E->dev;
				r->bytes = r->c_bytes = E->bytes; r->pid = E->pid; r->tgid = E->tgid; r->inflight = -1;
				r->cpu = E->cpu; r->category = E->category; r->error = E->error;
				r->flags = BR_FIRST | BR_UNPAIRED;
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
		if ((r = emit(b)) == NULL)
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

static PyObject *Bios_feed(Bios *b, PyObject *args)
{
	PyObject *oev;
	Py_buffer bev;
	Py_ssize_t n;
	if (!PyArg_ParseTuple(args, "O", &oev))
		return NULL;
	if (tc_get_events(oev, &bev, &n) < 0)
		return NULL;
	const event_t *ev = bev.buf;
	b->nout = 0;
	Py_BEGIN_ALLOW_THREADS
	for (Py_ssize_t k = 0; k < n && !b->oom; k++) {
		const event_t *E = &ev[k];
		int a = E->action;
		b->last_ts = E->ts;
		if (E->flags & EV_NOTE_PROCESS)
			continue;
		if (a != A_QUEUE && a != A_GETRQ && a != A_SPLIT && a != A_ISSUE && a != A_COMPLETE)
			continue;
		int32_t di;
		bdev_t *d = bdev(b, E->dev, &di);
		if (!d) {
			b->oom = 1;
			break;
		}
		switch (a) {
		case A_QUEUE:
			on_queue(b, E, d, di);
			break;
		case A_GETRQ:
			if (!E->bytes) {
				bio_t *x = get(b, di, E->sector, 0, 0, -1);
				if (x && !x->nbytes && x->g == NONE)
					x->g = E->ts;
			}
			break;
		case A_SPLIT:
			on_split(b, E, di);
			break;
		case A_ISSUE:
			on_issue(b, E, d, di);
			break;
		case A_COMPLETE:
			on_complete(b, E, d, di);
			break;
		}
	}
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&bev);
	if (b->oom)
		return PyErr_NoMemory();
	return PyBytes_FromStringAndSize((const char *)b->out, (Py_ssize_t)(b->nout * sizeof(biorec_t)));
}

static PyObject *Bios_set_machine(Bios *b, PyObject *args)
{
	unsigned int dev;
	int fua;
	if (!PyArg_ParseTuple(args, "Ip", &dev, &fua))
		return NULL;
	int32_t di;
	bdev_t *d = bdev(b, dev, &di);
	if (!d)
		return PyErr_NoMemory();
	d->machine = fua;
	Py_RETURN_NONE;
}

/* drop the bios queued (or, without a Q, issued) before ts: merged away or their completion lost */
static PyObject *Bios_expire(Bios *b, PyObject *args)
{
	unsigned long long before;
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

static PyObject *Bios_in_flight(Bios *b, PyObject *unused)
{
	return PyLong_FromSize_t(b->live);
}

/* requests issued and not completed on a disk, as the pairing counts them */
static PyObject *Bios_requests(Bios *b, PyObject *args)
{
	unsigned int dev;
	if (!PyArg_ParseTuple(args, "I", &dev))
		return NULL;
	for (size_t i = 0; i < b->ndevs; i++)
		if (b->devs[i].dev == dev)
			return PyLong_FromLongLong(b->devs[i].inflight);
	return PyLong_FromLong(0);
}

static PyObject *Bios_unpaired(Bios *b, void *unused)
{
	return PyLong_FromUnsignedLongLong(b->unpaired);
}

static PyObject *Bios_last_ts(Bios *b, void *unused)
{
	return PyLong_FromUnsignedLongLong(b->last_ts);
}

static void Bios_dealloc(Bios *b)
{
	for (size_t i = 0; i < b->ndevs; i++)
		free(b->devs[i].fl);
	free(b->devs);
	free(b->pool);
	free(b->heads);
	free(b->out);
	free(b->chain);
	Py_TYPE(b)->tp_free((PyObject *)b);
}

static PyObject *Bios_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	Bios *b = (Bios *)type->tp_alloc(type, 0);
	if (b)
		b->freelist = -1;
	return (PyObject *)b;
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
