/*
 * btt's own rules, to the byte (bttsim.h). Learnt from btt's documentation and sources and checked
 * against the real btt 2.09 (Debian's blktrace 1.2.0) on the traces of tests/traces/; the code is
 * ioscope's own. What btt does, record by record:
 *
 * - A device is set up at its first record that btt sets up (Q, A, G, S, I, M, R, D, C; messages):
 *   that record's time is the device's start. Until its first Q or A the device "culls": its
 *   records are dropped (their I/O began before the trace). Every record set up past that updates
 *   the device's end time. Records of 0 bytes are not set up, except R and A. A remap is set up on
 *   the record's own device (the traced one), whatever device its payload says the bio went to.
 *   Plugs and unplugs only count on a device already set up. X (split), B (bounce), pass-through
 *   (PC) records and notes other than process names are ignored.
 * - A process is found by pid at every record set up: the first process note read for a pid names it
 *   (pid 0: "kernel"; a name is cut at its first '/'), a pid seen before any note is "pid%09u" for
 *   good, and pids noted with one name are one process.
 * - Qs in flight are kept in btt's tree per device (rbtree.c); a Q at the start sector of one in the
 *   tree takes its place. G, S, I, M go to the Q btt's lookup finds for their sector; D and C to the
 *   Qs inside their range that its walk reaches. C ends those Qs. A second G of one Q (a split bio's
 *   pieces each have one) overwrites the first G's time; a split bio's Q is never issued nor
 *   completed, since no piece's D or C covers it.
 * - The statistics are btt's: averages of ns deltas (0 or negative counts 1), Q2Q and Q2A/Q2C under
 *   the *dm names on remapping devices (majors 9, 253, 254), one "last Q" time shared by both kinds,
 *   the Q2D histogram of BIT_TIME(D - Q) in ms, plug time as a sum of BIT_TIME differences, the
 *   active periods [D, C] merged where they touch.
 */
#include <float.h>

#include "bttsim.h"

static inline void avg_update(avg_t *a, uint64_t v)
{
	if (a->n++ == 0) {
		a->min = a->max = a->total = v;
	} else {
		if (v < a->min)
			a->min = v;
		else if (v > a->max)
			a->max = v;
		a->total += v;
	}
}

static inline void update_lq(uint64_t *last, avg_t *a, uint64_t t)
{
	if (*last != NONE)
		avg_update(a, t > *last ? t - *last : 1);
	*last = t;
}

/* a row of btt's latency files: Q2D at a D (stamped with the D's time; btt's plain difference of unsigned
 * times, not tdelta), Q2C (stamped with the Q's time) and D2C (with the C's) at a C */
static int file_row(bttsim_t *s, int kind, int32_t dev, uint64_t t, uint64_t v, uint64_t w)
{
	if (tc_room(&s->lat, &s->caplat, s->nlat, sizeof(*s->lat), 1024) < 0)
		return -1;
	blat_t *r = &s->lat[s->nlat++];
	r->kind = kind;
	r->dev = dev;
	r->t = t;
	r->v = v;
	r->w = w;
	return 0;
}

static uint64_t dbl_bits(double v)
{
	uint64_t u;
	memcpy(&u, &v, sizeof(u));
	return u;
}

/* btt's plat_x2c() (-L): a latency of a kind into its period; a latency freq seconds or more after the period's
 * first ends it (its line: the middle of its first and last time stamps, its mean latency) and starts the next */
static int plat_add(bttsim_t *s, plat_t *p, int kind, int32_t dev, uint64_t ts, uint64_t latency)
{
	double now = (double)ts / 1.0e9, lat = (double)latency / 1.0e9;
	if (p->nl && now - p->first_ts >= s->plat_freq) {
		double mid = p->first_ts + (p->last_ts - p->first_ts) / 2;
		if (file_row(s, BL_PLAT + kind, dev, dbl_bits(mid), dbl_bits(p->tl / (double)p->nl), 0) < 0)
			return -1;
		p->nl = 0;
	}
	if (p->nl == 0) {
		p->first_ts = p->last_ts = now;
		p->nl = 1;
		p->tl = lat;
	} else {
		p->last_ts = now;
		p->nl++;
		p->tl += lat;
	}
	return 0;
}

static int lat_row(bttsim_t *s, int kind, int32_t dev, uint64_t t, uint64_t v)
{
	if (s->plat_freq > 0.0 && plat_add(s, &s->devs[dev].plat[kind], kind, dev, t, v) < 0)
		return -1;
	return s->lat_on ? file_row(s, kind, dev, t, v, 0) : 0;
}

/* btt's update_range(): extend the last range while t comes less than range_delta after its end */
static int range_add(const bttsim_t *s, ranges_t *r, uint64_t t)
{
	if (r->n) {
		uint64_t *end = &r->iv[2 * r->n - 1];
		if (t < *end)
			return 0;
		if (bit_time(t - *end) < s->range_delta) {
			*end = t;
			return 0;
		}
	}
	if (tc_room(&r->iv, &r->cap, r->n, 2 * sizeof(*r->iv), 16) < 0)
		return -1;
	r->iv[2 * r->n] = r->iv[2 * r->n + 1] = t;
	r->n++;
	return 0;
}

/* btt's rstat add: a completion of nblks blocks at t, counted in its second (the seconds btt cuts from
 * BIT_TIME(t)); a second's line is written when a completion comes a second or more after its start */
static int rstat_add(bttsim_t *s, rstat_t *r, int32_t dev, uint64_t t, uint64_t nblks)
{
	int64_t cur = (int64_t)bit_time(t);
	if (r->base_sec < 0) {
		r->base_sec = cur;
	} else if (cur - r->base_sec >= 1) {
		if (s->files_on && file_row(s, BL_RATE, dev, (uint64_t)r->base_sec, r->ios, r->nblks) < 0)
			return -1;
		r->base_sec = cur;
		r->ios = r->nblks = 0;
	}
	r->ios++;
	r->nblks += nblks;
	return 0;
}

/* btt's seeks per second (-m): a bucket's value, its seeks over the time from its first to its last seek
 * (its count when it has one seek or no time between them) */
static double sps_value(const sps_t *b)
{
	double delta = bit_time(b->t_last) - bit_time(b->t_start);
	if (b->nseeks == 1 || delta < DBL_EPSILON)
		return (double)b->nseeks;
	return (double)b->nseeks / delta;
}

/* a seek at t in a bucket: the bucket ends (its line written) at a seek a second or more after its first */
static int sps_add(bttsim_t *s, sps_t *b, int kind, int32_t dev, uint64_t t)
{
	if (b->nseeks && bit_time(t) - bit_time(b->t_start) >= 1.0) {
		if (file_row(s, kind, dev, b->t_start, b->nseeks, dbl_bits(sps_value(b))) < 0)
			return -1;
		b->nseeks = 0;
	}
	b->t_last = t;
	if (b->nseeks++ == 0)
		b->t_start = t;
	return 0;
}

/* btt's seek distance as its files print it (a long long: negative backwards), before st_dist moves on */
static int64_t seek_signed(const stree_t *t, uint64_t s, uint64_t e)
{
	if ((t->last_start <= s && s <= t->last_end) || (t->last_start <= e && e <= t->last_end))
		return 0;
	return (int64_t)(s > t->last_end ? s - t->last_end : s - t->last_start);
}

static int queue_seek(bttsim_t *s, int32_t tree, uint64_t dist);

/* a seek of one of a device's two streams (Q2Q at a Q, D2D at a D): the averages' trees (handed to the
 * workers), the -s rows and the -m buckets */
static int seek_add(bttsim_t *s, bdev_t *d, int32_t dev, int is_d, uint64_t t, uint64_t sec, uint64_t end, int rd)
{
	stree_t *st = is_d ? &d->seek_d : &d->seek_q;
	if (s->no_seeks && !s->seek_on && !s->sps_on)
		return 0;
	int64_t sd = seek_signed(st, sec, end);
	uint64_t dist = st_dist(st, sec, end);
	if (!s->no_seeks && queue_seek(s, dev * 2 + is_d, dist) < 0)
		return -1;
	if (s->seek_on && file_row(s, (is_d ? BL_SEEK_D : BL_SEEK_Q) | (rd ? BL_READ : 0), dev, t, (uint64_t)sd, 0) < 0)
		return -1;
	if (s->sps_on && sps_add(s, is_d ? &d->sps_d : &d->sps_q, is_d ? BL_SPS_D : BL_SPS_Q, dev, t) < 0)
		return -1;
	return 0;
}

/* btt's -p track of a Q a C completes: its Q, the G, I, M and D it had, the C (btt's display_io_track) */
static int pio_track(bttsim_t *s, const qnode_t *q, int32_t dev, uint64_t t, uint64_t csec, uint64_t cn)
{
	if (file_row(s, BL_PIO_Q, dev, q->t, q->s, q->e - q->s) < 0 ||
	    (q->g != NONE && file_row(s, BL_PIO_G, dev, q->g, 0, 0) < 0) ||
	    (q->i != NONE && file_row(s, BL_PIO_I, dev, q->i, 0, 0) < 0) ||
	    (q->m != NONE && file_row(s, BL_PIO_M, dev, q->m, 0, 0) < 0) ||
	    (q->d != NONE && file_row(s, BL_PIO_D, dev, q->d, q->ds, q->dn) < 0))
		return -1;
	return file_row(s, BL_PIO_C, dev, t, csec, cn);
}

/* ------------------------------------------------------------------ btt's iostat (-I) */

/* btt's update_tot_qusz(): the queue size times the time since it last changed, in both sets */
static void ios_qusz(bdev_t *d, double now)
{
	d->ist.tot_qusz += (now - d->ist.last_qu_change) * d->ist.cur_qusz;
	d->ist_all.tot_qusz += (now - d->ist_all.last_qu_change) * d->ist_all.cur_qusz;
	d->ist.last_qu_change = d->ist_all.last_qu_change = now;
}

/* btt's update_idle_time(): the time since the device's last change counts idle when nothing is on the device
 * (this interval's count decides for both sets), or always when forced (at every dump, as btt does) */
static void ios_idle(bdev_t *d, double now, int force)
{
	if (d->ist.cur_dev == 0 || force) {
		d->ist.idle_time += now - d->ist.last_dev_change;
		d->ist_all.idle_time += now - d->ist_all.last_dev_change;
	}
	d->ist.last_dev_change = d->ist_all.last_dev_change = now;
}

/* btt's iostat dump of one interval (at a record's time stamp): per device its counters (after the forced idle
 * and queue-size updates btt makes), then reset them */
static int ios_dump(bttsim_t *s, uint64_t stamp)
{
	double now = (double)stamp / 1.0e9;
	for (size_t k = 0; k < s->norder; k++) {
		int32_t idx = s->order[k];
		bdev_t *d = &s->devs[idx];
		iostat_t *p = &d->ist;
		ios_idle(d, now, 1);
		ios_qusz(d, now);
		if (file_row(s, BL_IOS_1, idx, stamp, p->rqm[0], p->rqm[1]) < 0 ||
		    file_row(s, BL_IOS_2, idx, s->io_last_start, p->ios[0], p->ios[1]) < 0 ||
		    file_row(s, BL_IOS_3, idx, 0, p->sec[0], p->sec[1]) < 0 ||
		    file_row(s, BL_IOS_4, idx, 0, p->wait, p->svctm) < 0 ||
		    file_row(s, BL_IOS_5, idx, 0, dbl_bits(p->tot_qusz), dbl_bits(p->idle_time)) < 0)
			return -1;
		p->rqm[0] = p->rqm[1] = p->ios[0] = p->ios[1] = p->sec[0] = p->sec[1] = 0;
		p->wait = p->svctm = 0;
		p->tot_qusz = p->idle_time = 0.0;
	}
	return file_row(s, BL_IOS_END, -1, stamp, 0, 0);
}

/* btt's iostat_check_time() at every record it reads past the time window (any action, any device) */
static int ios_check(bttsim_t *s, uint64_t t)
{
	if (s->io_last_start == NONE) {
		s->io_last_start = t;
	} else if (t - s->io_last_start >= s->iostat_interval) {
		if (ios_dump(s, t) < 0)
			return -1;
		s->io_last_start = t;
	}
	s->io_last_stamp = t;
	return 0;
}

/* btt's bucket of a request of bytes (512-byte blocks, the last for more than 1024); -1 for less than a
 * block, which btt counts before its array (undefined: not counted here) */
static int histo_idx(uint32_t bytes)
{
	int64_t i = (int64_t)(bytes >> 9) - 1;
	return i < 0 ? -1 : i > N_HIST_BKTS - 1 ? N_HIST_BKTS - 1 : (int)i;
}

/* ------------------------------------------------------------------ processes */

static size_t hslot(const bttsim_t *s, uint32_t pid)
{
	size_t h = (size_t)(pid * 2654435761u) & (s->hcap - 1);
	while (s->hval[h] >= 0 && s->hkey[h] != pid)
		h = (h + 1) & (s->hcap - 1);
	return h;
}

static int32_t pid_find(const bttsim_t *s, uint32_t pid)
{
	if (!s->hcap)
		return -1;
	return s->hval[hslot(s, pid)];
}

static int pid_insert(bttsim_t *s, uint32_t pid, int32_t proc)
{
	if ((s->hn + 1) * 2 > s->hcap) {
		size_t cap = s->hcap ? s->hcap * 2 : 256;
		uint32_t *k = malloc(cap * sizeof(*k));
		int32_t *v = malloc(cap * sizeof(*v));
		if (!k || !v) {
			free(k);
			free(v);
			return -1;
		}
		uint32_t *ok = s->hkey;
		int32_t *ov = s->hval;
		size_t ocap = s->hcap;
		s->hkey = k;
		s->hval = v;
		s->hcap = cap;
		for (size_t i = 0; i < cap; i++)
			v[i] = -1;
		for (size_t i = 0; i < ocap; i++)
			if (ov[i] >= 0) {
				size_t h = hslot(s, ok[i]);
				k[h] = ok[i];
				v[h] = ov[i];
			}
		free(ok);
		free(ov);
	}
	size_t h = hslot(s, pid);
	if (s->hval[h] < 0)
		s->hn++;
	s->hkey[h] = pid;
	s->hval[h] = proc;
	return 0;
}

static int32_t proc_new(bttsim_t *s, int64_t name)
{
	if (tc_room(&s->procs, &s->capprocs, s->nprocs, sizeof(*s->procs), 64) < 0)
		return -1;
	bproc_t *p = &s->procs[s->nprocs];
	memset(p, 0, sizeof(*p));
	p->name = name;
	p->last_q = NONE;
	return (int32_t)s->nprocs++;
}

/* btt's find_process(pid, NULL): the pid's process, made as "pid%09u" when it has none */
static int32_t proc_of(bttsim_t *s, uint32_t pid)
{
	int32_t p = pid_find(s, pid);
	if (p >= 0)
		return p;
	p = proc_new(s, -(int64_t)pid - 1);
	if (p < 0 || pid_insert(s, pid, p) < 0)
		return -1;
	return p;
}

/* btt's process_alloc(pid, name) for a process note: the first name of a pid stays */
static int proc_note(bttsim_t *s, uint32_t pid, int32_t name)
{
	if (name < 0 || pid_find(s, pid) >= 0)
		return 0;
	if ((size_t)name >= s->nby_name) {
		size_t n = (size_t)name + 64;
		int32_t *b = realloc(s->by_name, n * sizeof(*b));
		if (!b)
			return -1;
		for (size_t i = s->nby_name; i < n; i++)
			b[i] = -1;
		s->by_name = b;
		s->nby_name = n;
	}
	int32_t p = s->by_name[name];
	if (p < 0) {
		p = proc_new(s, name);
		if (p < 0)
			return -1;
		s->by_name[name] = p;
	}
	return pid_insert(s, pid, p);
}

/* ------------------------------------------------------------------ active periods */

static int live_add(live_t *l, uint64_t a, uint64_t b)
{
	/* the first period ending at or after a: it and the ones after that start at or before b merge */
	size_t lo = 0, hi = l->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (l->iv[2 * mid + 1] < a)
			lo = mid + 1;
		else
			hi = mid;
	}
	size_t j = lo;
	while (j < l->n && l->iv[2 * j] <= b) {
		if (l->iv[2 * j] < a)
			a = l->iv[2 * j];
		if (l->iv[2 * j + 1] > b)
			b = l->iv[2 * j + 1];
		j++;
	}
	if (j == lo) {   /* nothing merged: make room */
		if (tc_room(&l->iv, &l->cap, l->n, 2 * sizeof(*l->iv), 64) < 0)
			return -1;
		memmove(&l->iv[2 * (lo + 1)], &l->iv[2 * lo], (l->n - lo) * 2 * sizeof(uint64_t));
		l->n++;
	} else if (j > lo + 1) {
		memmove(&l->iv[2 * (lo + 1)], &l->iv[2 * j], (l->n - j) * 2 * sizeof(uint64_t));
		l->n -= j - lo - 1;
	}
	l->iv[2 * lo] = a;
	l->iv[2 * lo + 1] = b;
	return 0;
}

/* periods ending before horizon can no longer grow: count them */
static void live_fold(live_t *l, uint64_t horizon)
{
	size_t k = 0;
	while (k < l->n && l->iv[2 * k + 1] < horizon) {
		l->done_n++;
		l->done_live += l->iv[2 * k + 1] - l->iv[2 * k];
		if (l->iv[2 * k + 1] > l->done_end)
			l->done_end = l->iv[2 * k + 1];
		k++;
	}
	if (k) {
		memmove(l->iv, &l->iv[2 * k], (l->n - k) * 2 * sizeof(uint64_t));
		l->n -= k;
	}
}

static PyObject *live_export(const live_t *l)
{
	uint64_t n = l->done_n + l->n, tot = l->done_live, end = l->done_end;
	for (size_t k = 0; k < l->n; k++) {
		tot += l->iv[2 * k + 1] - l->iv[2 * k];
		if (l->iv[2 * k + 1] > end)
			end = l->iv[2 * k + 1];
	}
	return Py_BuildValue("(KKK)", (unsigned long long)n, (unsigned long long)tot, (unsigned long long)end);
}

void bs_fold_live(bttsim_t *s, uint64_t now)
{
	uint64_t all = now;
	for (size_t k = 0; k < s->norder; k++) {
		bdev_t *d = &s->devs[s->order[k]];
		uint64_t h = qt_min_issued(&s->qt, d->root);
		if (h > now)
			h = now;
		if (h < all)
			all = h;
		live_fold(&d->live, h);
	}
	live_fold(&s->live_all, all);
}

/* ------------------------------------------------------------------ the seek-tree workers */

static int queue_seek(bttsim_t *s, int32_t tree, uint64_t dist)
{
	if (tc_room(&s->jobs, &s->capjobs, s->njobs, sizeof(*s->jobs), 4096) < 0)
		return -1;
	s->jobs[s->njobs].dist = dist;
	s->jobs[s->njobs].tree = tree;
	s->njobs++;
	return 0;
}

typedef struct {
	bttsim_t *s;
	int which;
} worker_arg_t;

static void *seek_worker(void *arg)
{
	bttsim_t *s = ((worker_arg_t *)arg)->s;
	int which = ((worker_arg_t *)arg)->which;
	free(arg);
	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (s->done[which] == s->generation && !s->quit)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->done[which] == s->generation) {
			pthread_mutex_unlock(&s->mu);
			return NULL;
		}
		pthread_mutex_unlock(&s->mu);
		for (size_t i = 0; i < s->nwork; i++) {
			if ((s->work[i].tree & 1) != which)
				continue;
			bdev_t *d = &s->devs[s->work[i].tree >> 1];
			if (st_insert(which ? &d->seek_d : &d->seek_q, s->work[i].dist) < 0)
				s->worker_oom = 1;
		}
		pthread_mutex_lock(&s->mu);
		s->done[which] = s->generation;
		if (--s->busy == 0)
			pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
}

/* wait (without the GIL) until the workers have inserted everything handed to them */
int bs_begin(bttsim_t *s)
{
	if (s->started) {
		Py_BEGIN_ALLOW_THREADS
		pthread_mutex_lock(&s->mu);
		while (s->busy > 0)
			pthread_cond_wait(&s->cv, &s->mu);
		pthread_mutex_unlock(&s->mu);
		Py_END_ALLOW_THREADS
	}
	return s->worker_oom ? -1 : 0;
}

int bs_end(bttsim_t *s)
{
	if (!s->njobs)
		return 0;
	seekjob_t *tj = s->work;
	size_t tc = s->capwork;
	s->work = s->jobs;
	s->capwork = s->capjobs;
	s->nwork = s->njobs;
	s->jobs = tj;
	s->capjobs = tc;
	s->njobs = 0;
	if (!s->started) {
		pthread_mutex_init(&s->mu, NULL);
		pthread_cond_init(&s->cv, NULL);
		int ok = 1;
		for (int w = 0; w < 2 && ok; w++) {
			worker_arg_t *a = malloc(sizeof(*a));
			if (!a) {
				ok = 0;
				break;
			}
			a->s = s;
			a->which = w;
			if (pthread_create(&s->worker[w], NULL, seek_worker, a) != 0) {
				free(a);
				ok = 0;
				if (w == 1) {   /* one worker runs: stop it before inserting here */
					pthread_mutex_lock(&s->mu);
					s->quit = 1;
					pthread_cond_broadcast(&s->cv);
					pthread_mutex_unlock(&s->mu);
					pthread_join(s->worker[0], NULL);
				}
			}
		}
		if (!ok) {   /* no threads: insert here */
			pthread_mutex_destroy(&s->mu);
			pthread_cond_destroy(&s->cv);
			for (size_t i = 0; i < s->nwork; i++) {
				bdev_t *d = &s->devs[s->work[i].tree >> 1];
				if (st_insert((s->work[i].tree & 1) ? &d->seek_d : &d->seek_q, s->work[i].dist) < 0)
					return -1;
			}
			s->quit = 0;
			return 0;
		}
		s->started = 1;
	}
	pthread_mutex_lock(&s->mu);
	s->busy = 2;
	s->generation++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

/* ------------------------------------------------------------------ the records */

int bs_ensure_dev(bttsim_t *s, size_t idx)
{
	size_t no = s->ndevs;
	if (idx < s->ndevs)
		return 0;
	return tc_grow(&s->order, &no, idx + 8, sizeof(*s->order)) < 0 ||
	       tc_grow(&s->devs, &s->ndevs, idx + 8, sizeof(*s->devs)) < 0 ? -1 : 0;
}

/* btt's dip_alloc() for a record set up on device idx: NULL while the device culls */
static bdev_t *dip_alloc(bttsim_t *s, int32_t idx, uint64_t t, int q_or_a)
{
	bdev_t *d = &s->devs[idx];
	if (!d->alloc) {
		d->alloc = 1;
		d->culling = 1;
		d->start_t = t;
		d->root = -1;
		d->last_q = NONE;
		st_init(&d->seek_q);
		st_init(&d->seek_d);
		d->rs.base_sec = -1;
		s->order[s->norder++] = idx;
	}
	if (d->culling) {
		if (!q_or_a)
			return NULL;
		d->culling = 0;
	}
	d->end_t = t;
	return d;
}

#define UPDATE(ph, d, pip, v) do { \
		avg_update(&s->all[ph], v); \
		avg_update(&(d)->avg[ph], v); \
		if ((pip) >= 0) avg_update(&s->procs[pip].avg[ph], v); \
	} while (0)

static int q2d_bucket(uint64_t q2d)
{
	long msec = (long)(bit_time(q2d) / 0.001);
	if (msec < 0 || msec >= 1000) return 9;
	if (msec >= 500) return 8;
	if (msec >= 250) return 7;
	if (msec >= 100) return 6;
	if (msec >= 75) return 5;
	if (msec >= 50) return 4;
	if (msec >= 25) return 3;
	if (msec >= 10) return 2;
	if (msec >= 5) return 1;
	return 0;
}

int bs_event(bttsim_t *s, const bs_ev_t *e)
{
	int a = e->action;
	uint64_t t = e->t;
	bdev_t *d;
	int32_t x, pip;

	if (s->past_end)
		return 0;
	if (a == BS_NOTE)
		return proc_note(s, e->pid, e->name);
	if (e->dev < 0)
		return 0;
	if (a == BS_MESSAGE) {   /* btt sets a message up on its device (and prints it to its .msg file) */
		d = dip_alloc(s, e->dev, t, 0);
		if (d && proc_of(s, e->pid) < 0)
			return -1;
		if (d && s->files_on && file_row(s, BL_MSG, e->dev, t, (uint64_t)s->cur_ord, 0) < 0)
			return -1;
		return 0;
	}
	/* a name given with a record: a process note just before it (an ioscope capture's export writes one
	 * before each pid's first record) */
	if (e->name >= 0 && proc_note(s, e->pid, e->name) < 0)
		return -1;
	if (e->category & TC_PC_)
		return 0;
	if (s->time_bounded) {
		if (bit_time(t) < s->t_start)
			return 0;
		if (bit_time(t) > s->t_end) {
			s->past_end = 1;
			return 0;
		}
	}
	if (s->iostat_on && ios_check(s, t) < 0)
		return -1;
	switch (a) {
	case A_PLUG: case A_UNPLUG_IO: case A_UNPLUG_TIMER:
		d = &s->devs[e->dev];
		if (!d->alloc)
			return 0;
		if (a == A_UNPLUG_IO) {   /* btt's -u: every unplug of a device set up, plugged or not, culling or not */
			int n = (int)(uint32_t)e->aux;   /* btt reads the count into an int */
			int b = n / UP_BKT_WIDTH;
			if (b >= 0)   /* a negative count: btt indexes before its array (undefined): not counted */
				d->uphist[b > N_UP_BKTS - 1 ? N_UP_BKTS - 1 : b]++;
		}
		if (a == A_PLUG) {
			if (!d->plugged) {
				d->plugged = 1;
				d->last_plug = bit_time(t);
			}
		} else if (d->plugged) {
			if (a == A_UNPLUG_IO) {
				d->nplugs++;
				d->nios_up += e->aux;
			} else {
				d->nplugs_t++;
				d->nios_upt += e->aux;
			}
			d->plugged = 0;
			d->plugged_time += bit_time(t) - d->last_plug;
		}
		return 0;
	case A_SPLIT:   /* ignored by btt: only noted here, for what it counts differently */
		d = &s->devs[e->dev];
		if (d->alloc && !d->culling && (x = qt_find(&s->qt, d->root, e->sector)) >= 0) {
			d->x_events++;
			if (!s->qt.n[x].split) {
				s->qt.n[x].split = 1;
				d->x_bios++;
			}
		}
		return 0;
	case A_QUEUE: case A_GETRQ: case A_SLEEPRQ: case A_INSERT: case A_BACKMERGE: case A_FRONTMERGE:
	case A_ISSUE: case A_COMPLETE:
		if (e->bytes == 0)
			return 0;
		break;
	case A_REQUEUE: case A_REMAP:
		break;
	default:
		return 0;
	}
	d = dip_alloc(s, e->dev, t, a == A_QUEUE || a == A_REMAP);
	if (!d)
		return 0;
	pip = proc_of(s, e->pid);
	if (pip < 0)
		return -1;
	uint64_t end = e->sector + (e->bytes >> 9);
	qnode_t *q;
	switch (a) {
	case A_QUEUE: {
		int replaced;
		x = qt_insert(&s->qt, &d->root, e->sector, end, &replaced);
		if (x < 0)
			return -1;
		q = &s->qt.n[x];
		if (replaced)
			d->q_replaced++;
		q->t = t;
		q->g = q->i = q->m = q->d = NONE;
		q->sl = 0;
		q->pip = pip;
		q->split = 0;
		if (seek_add(s, d, e->dev, 0, t, e->sector, end, (e->category & TC_READ_) != 0) < 0)
			return -1;
		update_lq(&d->last_q, &d->avg[d->dm ? BP_Q2Q_DM : BP_Q2Q], t);
		update_lq(&s->procs[pip].last_q, &s->procs[pip].avg[d->dm ? BP_Q2Q_DM : BP_Q2Q], t);
		update_lq(&s->last_q, &s->all[d->dm ? BP_Q2Q_DM : BP_Q2Q], t);
		d->n_qs++;
		d->t_act_q += d->n_act_q;
		d->n_act_q++;
		if (range_add(s, &s->qr, t) < 0 || range_add(s, &d->qr, t) < 0 || range_add(s, &s->procs[pip].qr, t) < 0)
			return -1;
		if (!d->dm && histo_idx(e->bytes) >= 0)
			s->qhist[histo_idx(e->bytes)]++;
		break;
	}
	case A_REMAP:
		if (e->target >= 0 && e->target != e->dev)
			d->a_elsewhere++;
		if (e->auxdev >= 0 && (size_t)e->auxdev < s->ndevs && s->devs[e->auxdev].alloc) {
			bdev_t *from = &s->devs[e->auxdev];
			if ((x = qt_find(&s->qt, from->root, e->aux)) >= 0) {
				q = &s->qt.n[x];
				UPDATE(from->dm ? BP_Q2A_DM : BP_Q2A, from, q->pip, tdelta(q->t, t));
			}
		}
		break;
	case A_GETRQ:
		if (s->iostat_on) {   /* btt's iostat_getrq() */
			ios_qusz(d, (double)t / 1.0e9);
			d->ist.cur_qusz++;
			d->ist_all.cur_qusz++;
		}
		s->g_node = x = qt_find(&s->qt, d->root, e->sector);
		if (x >= 0) {
			q = &s->qt.n[x];
			q->g = t;
			UPDATE(BP_Q2G, d, q->pip, tdelta(q->t, t));
			if (q->sl != 0)
				UPDATE(BP_S2G, d, q->pip, tdelta(q->sl, t));
		}
		break;
	case A_SLEEPRQ:
		if ((x = qt_find(&s->qt, d->root, e->sector)) >= 0)
			s->qt.n[x].sl = t;
		break;
	case A_INSERT:
		if ((x = qt_find(&s->qt, d->root, e->sector)) >= 0) {
			q = &s->qt.n[x];
			q->i = t;
			if (q->g != NONE)
				UPDATE(BP_G2I, d, q->pip, tdelta(q->g, t));
		}
		break;
	case A_BACKMERGE: case A_FRONTMERGE:
		if (s->iostat_on) {   /* btt's iostat_merge() */
			d->ist.rqm[(e->category & TC_READ_) != 0]++;
			d->ist_all.rqm[(e->category & TC_READ_) != 0]++;
		}
		if ((x = qt_find(&s->qt, d->root, e->sector)) >= 0) {
			q = &s->qt.n[x];
			q->m = t;
			UPDATE(BP_Q2M, d, q->pip, tdelta(q->t, t));
		}
		if (d->n_act_q)
			d->n_act_q--;
		break;
	case A_REQUEUE:
		d->n_qs++;
		d->t_act_q += d->n_act_q;
		d->n_act_q++;
		break;
	case A_ISSUE:
		if (d->n_act_q)
			d->n_act_q--;
		if (seek_add(s, d, e->dev, 1, t, e->sector, end, (e->category & TC_READ_) != 0) < 0)
			return -1;
		if (s->iostat_on) {   /* btt's iostat_issue() */
			int rw = (e->category & TC_READ_) != 0;
			d->ist.ios[rw]++;
			d->ist_all.ios[rw]++;
			d->ist.sec[rw] += e->bytes >> 9;
			d->ist_all.sec[rw] += e->bytes >> 9;
			ios_idle(d, (double)t / 1.0e9, 0);
			d->ist.cur_dev++;
			d->ist_all.cur_dev++;
		}
		if (s->bno_on && file_row(s, BL_BNO | ((e->category & TC_READ_) ? BL_READ : 0), e->dev, t, e->sector, end) < 0)
			return -1;
		if (s->aqd_on && file_row(s, BL_AQD, e->dev, t, (uint64_t)d->aqd, 1) < 0)
			return -1;
		d->aqd++;
		d->n_ds++;
		if (!d->dm && histo_idx(e->bytes) >= 0)
			s->dhist[histo_idx(e->bytes)]++;
		if (qt_walk(&s->qt, d->root, e->sector, end) < 0)
			return -1;
		for (size_t h = 0; h < s->qt.nhits; h++) {
			q = &s->qt.n[s->qt.hits[h]];
			if (q->i != NONE)
				UPDATE(BP_I2D, d, q->pip, tdelta(q->i, t));
			else if (q->m != NONE)
				UPDATE(BP_M2D, d, q->pip, tdelta(q->m, t));
			q->d = t;
			q->ds = e->sector;
			q->dn = e->bytes >> 9;
			d->q2d[q2d_bucket(t - q->t)]++;
			if (lat_row(s, BL_Q2D, e->dev, t, t - q->t) < 0)
				return -1;
		}
		break;
	case A_COMPLETE: {
		uint64_t nblk = e->bytes >> 9, last_d = NONE;   /* last_d: btt's -P D time of the C */
		avg_update(&s->all[BP_BLKS], nblk);
		avg_update(&d->avg[BP_BLKS], nblk);
		avg_update(&s->procs[pip].avg[BP_BLKS], nblk);
		if (range_add(s, &s->cr, t) < 0 || range_add(s, &d->cr, t) < 0 || range_add(s, &s->procs[pip].cr, t) < 0)
			return -1;
		if (rstat_add(s, &d->rs, e->dev, t, nblk) < 0 || rstat_add(s, &s->rs, -1, t, nblk) < 0)
			return -1;
		if (d->aqd > 0) {
			if (s->aqd_on && file_row(s, BL_AQD, e->dev, t, (uint64_t)d->aqd, 0) < 0)
				return -1;
			d->aqd--;
		}
		if (qt_walk(&s->qt, d->root, e->sector, end) < 0)
			return -1;
		if (s->qt.nhits > s->capdone) {
			size_t cap = s->qt.nhits * 2;
			uint64_t *n = realloc(s->done_ts, cap * 2 * sizeof(*n));
			if (!n)
				return -1;
			s->done_ts = n;
			s->capdone = cap;
		}
		s->ndone = 0;
		for (size_t h = 0; h < s->qt.nhits; h++) {
			q = &s->qt.n[s->qt.hits[h]];
			UPDATE(d->dm ? BP_Q2C_DM : BP_Q2C, d, q->pip, tdelta(q->t, t));
			if (lat_row(s, BL_Q2C, e->dev, q->t, tdelta(q->t, t)) < 0)
				return -1;
			if (q->d != NONE) {
				if (live_add(&d->live, q->d, t) < 0 || live_add(&s->live_all, q->d, t) < 0)
					return -1;
				UPDATE(BP_D2C, d, q->pip, tdelta(q->d, t));
				if (lat_row(s, BL_D2C, e->dev, t, tdelta(q->d, t)) < 0)
					return -1;
				if (s->iostat_on) {   /* btt's iostat_complete() */
					uint64_t w = q->i != NONE ? tdelta(q->i, t) : q->m != NONE ? tdelta(q->m, t) : 0;
					d->ist.wait += w;
					d->ist_all.wait += w;
					ios_qusz(d, (double)t / 1.0e9);
					d->ist.cur_qusz--;
					d->ist_all.cur_qusz--;
					ios_idle(d, (double)t / 1.0e9, 0);
					d->ist.cur_dev--;
					d->ist_all.cur_dev--;
					d->ist.svctm += tdelta(q->t, t);
					d->ist_all.svctm += tdelta(q->t, t);
				}
			}
			if (s->pio_on && pio_track(s, q, e->dev, t, e->sector, e->bytes >> 9) < 0)
				return -1;
			if (s->pit_on && file_row(s, BL_PIT_Q, e->dev, q->t, 0, 0) < 0)
				return -1;
			if (q->d != NONE)
				last_d = q->d;
			s->done_ts[2 * s->ndone] = q->t;
			s->done_ts[2 * s->ndone + 1] = q->s;
			s->ndone++;
		}
		if (s->pio_on && file_row(s, BL_PIO_END, e->dev, t, 0, 0) < 0)
			return -1;
		if (s->pit_on && file_row(s, BL_PIT_END, e->dev, t, last_d, 0) < 0)
			return -1;
		for (size_t h = 0; h < s->qt.nhits; h++)
			qt_erase(&s->qt, &d->root, s->qt.hits[h]);
		if (d->live.n > 4096 || s->live_all.n > 4096)
			bs_fold_live(s, t);
		break;
	}
	}
	return 0;
}

/* ------------------------------------------------------------------ life cycle and results */

void bs_init(bttsim_t *s)
{
	memset(s, 0, sizeof(*s));
	s->last_q = NONE;
	s->g_node = -1;
	s->range_delta = 0.1;
	s->rs.base_sec = -1;
	s->iostat_interval = 1000000000;
	s->io_last_start = NONE;
	qt_init(&s->qt);
}

void bs_free(bttsim_t *s)
{
	if (s->started) {
		pthread_mutex_lock(&s->mu);
		s->quit = 1;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		Py_BEGIN_ALLOW_THREADS
		pthread_join(s->worker[0], NULL);
		pthread_join(s->worker[1], NULL);
		Py_END_ALLOW_THREADS
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
	}
	for (size_t i = 0; i < s->ndevs; i++) {
		free(s->devs[i].seek_q.n);
		free(s->devs[i].seek_d.n);
		free(s->devs[i].live.iv);
		free(s->devs[i].qr.iv);
		free(s->devs[i].cr.iv);
	}
	for (size_t i = 0; i < s->nprocs; i++) {
		free(s->procs[i].qr.iv);
		free(s->procs[i].cr.iv);
	}
	free(s->qr.iv);
	free(s->cr.iv);
	free(s->devs);
	free(s->order);
	free(s->procs);
	free(s->hkey);
	free(s->hval);
	free(s->by_name);
	free(s->live_all.iv);
	free(s->done_ts);
	free(s->lat);
	free(s->jobs);
	free(s->work);
	qt_free(&s->qt);
	memset(s, 0, sizeof(*s));
}

static PyObject *avgs_export(const avg_t *a)
{
	PyObject *l = PyList_New(BP_N);
	if (!l)
		return NULL;
	for (int i = 0; i < BP_N; i++) {
		PyObject *x = Py_BuildValue("(KKKK)", (unsigned long long)a[i].n, (unsigned long long)a[i].min,
					    (unsigned long long)a[i].max, (unsigned long long)a[i].total);
		if (!x) {
			Py_DECREF(l);
			return NULL;
		}
		PyList_SET_ITEM(l, i, x);
	}
	return l;
}

/* ranges as bytes of (start, end) u64 pairs */
static PyObject *ranges_export(const ranges_t *r)
{
	return PyBytes_FromStringAndSize((const char *)r->iv, (Py_ssize_t)(r->n * 2 * sizeof(uint64_t)));
}

static PyObject *rstat_export(const rstat_t *r)
{
	return Py_BuildValue("(LKK)", (long long)r->base_sec, (unsigned long long)r->ios, (unsigned long long)r->nblks);
}

/* a device's open bucket of seeks per second (its last line of btt's -m file): (first seek's time, seeks,
 * value) */
static int set_sps(PyObject *dct, const char *key, const sps_t *b)
{
	PyObject *x = Py_BuildValue("(KKd)", (unsigned long long)b->t_start, (unsigned long long)b->nseeks,
				    b->nseeks ? sps_value(b) : 0.0);
	int r = x ? PyDict_SetItemString(dct, key, x) : -1;
	Py_XDECREF(x);
	return r;
}

/* a device's open -L periods, by BL_Q2D, BL_D2C, BL_Q2C: (latencies, the line btt prints at its end) */
static int set_plat(PyObject *dct, const plat_t *p)
{
	PyObject *l = Py_BuildValue("[(Kdd)(Kdd)(Kdd)]",
		(unsigned long long)p[0].nl, p[0].first_ts + (p[0].last_ts - p[0].first_ts) / 2, p[0].nl ? p[0].tl / (double)p[0].nl : 0.0,
		(unsigned long long)p[1].nl, p[1].first_ts + (p[1].last_ts - p[1].first_ts) / 2, p[1].nl ? p[1].tl / (double)p[1].nl : 0.0,
		(unsigned long long)p[2].nl, p[2].first_ts + (p[2].last_ts - p[2].first_ts) / 2, p[2].nl ? p[2].tl / (double)p[2].nl : 0.0);
	int r = l ? PyDict_SetItemString(dct, "plat", l) : -1;
	Py_XDECREF(l);
	return r;
}

/* a device's counts (the -u histogram) as a list */
static int set_counts(PyObject *dct, const char *key, const uint64_t *c, int n)
{
	PyObject *l = PyList_New(n);
	if (!l)
		return -1;
	for (int i = 0; i < n; i++) {
		PyObject *x = PyLong_FromUnsignedLongLong(c[i]);
		if (!x) {
			Py_DECREF(l);
			return -1;
		}
		PyList_SET_ITEM(l, i, x);
	}
	int r = PyDict_SetItemString(dct, key, l);
	Py_DECREF(l);
	return r;
}

static uint64_t count_nodes(const qtree_t *q, int32_t x, uint64_t *split)
{
	uint64_t n = 0;
	while (x >= 0) {
		n++;
		if (q->n[x].split)
			(*split)++;
		n += count_nodes(q, q->n[x].l, split);
		x = q->n[x].r;
	}
	return n;
}

PyObject *bs_result(bttsim_t *s)
{
	if (bs_begin(s) < 0)
		return PyErr_NoMemory();
	PyObject *devs = PyList_New(0), *procs = NULL, *res = NULL;
	if (!devs)
		return NULL;
	for (size_t k = 0; k < s->norder; k++) {
		int32_t idx = s->order[k];
		bdev_t *d = &s->devs[idx];
		uint64_t split = 0, inflight = count_nodes(&s->qt, d->root, &split);
		PyObject *q2d = Py_BuildValue("[KKKKKKKKKK]", d->q2d[0], d->q2d[1], d->q2d[2], d->q2d[3], d->q2d[4],
					      d->q2d[5], d->q2d[6], d->q2d[7], d->q2d[8], d->q2d[9]);
		PyObject *dct = Py_BuildValue(
			"{s:i,s:K,s:K,s:K,s:K,s:K,s:N,s:i,s:d,s:d,s:K,s:K,s:K,s:K,s:N,s:N,s:N,s:N,s:K,s:K,s:K,s:K,s:K,s:K,"
			"s:N,s:N,s:N}",
			"idx", idx, "start_time", d->start_t, "end_time", d->end_t, "n_qs", d->n_qs, "n_ds", d->n_ds,
			"t_act_q", d->t_act_q, "avg", avgs_export(d->avg), "plugged", d->plugged,
			"last_plug", d->last_plug, "plugged_s", d->plugged_time, "nplugs", d->nplugs,
			"nplugs_t", d->nplugs_t, "nios_up", d->nios_up, "nios_upt", d->nios_upt, "q2d_hist", q2d,
			"seek_q2q", st_export(&d->seek_q), "seek_d2d", st_export(&d->seek_d), "live", live_export(&d->live),
			"in_flight", inflight, "split_events", d->x_events, "split_bios", d->x_bios,
			"split_never_completed", split, "q_replaced", d->q_replaced, "remaps_elsewhere", d->a_elsewhere,
			"qranges", ranges_export(&d->qr), "cranges", ranges_export(&d->cr), "rstat", rstat_export(&d->rs));
		if (s->iostat_on) {   /* btt's last dump (the whole trace's) at the last record's time */
			ios_idle(d, (double)s->io_last_stamp / 1.0e9, 1);
			ios_qusz(d, (double)s->io_last_stamp / 1.0e9);
		}
		const iostat_t *ia = &d->ist_all;
		PyObject *ios = Py_BuildValue("(KKKKKKKKdd)", ia->rqm[0], ia->rqm[1], ia->ios[0], ia->ios[1], ia->sec[0],
					      ia->sec[1], ia->wait, ia->svctm, ia->tot_qusz, ia->idle_time);
		if (dct && (!ios || PyDict_SetItemString(dct, "iostat", ios) < 0)) {
			Py_XDECREF(ios);
			Py_DECREF(dct);
			goto err;
		}
		Py_XDECREF(ios);
		if (dct && (set_sps(dct, "sps_q2q", &d->sps_q) < 0 || set_sps(dct, "sps_d2d", &d->sps_d) < 0 ||
			    set_counts(dct, "unplug_hist", d->uphist, N_UP_BKTS) < 0 || set_plat(dct, d->plat) < 0)) {
			Py_DECREF(dct);
			goto err;
		}
		if (!dct || PyList_Append(devs, dct) < 0) {
			Py_XDECREF(dct);
			goto err;
		}
		Py_DECREF(dct);
	}
	procs = PyList_New((Py_ssize_t)s->nprocs);
	if (!procs)
		goto err;
	for (size_t i = 0; i < s->nprocs; i++) {
		PyObject *x = Py_BuildValue("(LNNN)", (long long)s->procs[i].name, avgs_export(s->procs[i].avg),
					    ranges_export(&s->procs[i].qr), ranges_export(&s->procs[i].cr));
		if (!x)
			goto err;
		PyList_SET_ITEM(procs, (Py_ssize_t)i, x);
	}
	res = Py_BuildValue("{s:K,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:y#,s:y#}", "iostat_last_stamp",
			    (unsigned long long)s->io_last_stamp, "devices", devs, "processes", procs,
			    "all", avgs_export(s->all), "live", live_export(&s->live_all), "qranges", ranges_export(&s->qr),
			    "cranges", ranges_export(&s->cr), "rstat", rstat_export(&s->rs),
			    "qhist", (const char *)s->qhist, (Py_ssize_t)sizeof(s->qhist),
			    "dhist", (const char *)s->dhist, (Py_ssize_t)sizeof(s->dhist));
	return res;
err:
	Py_DECREF(devs);
	Py_XDECREF(procs);
	return NULL;
}
