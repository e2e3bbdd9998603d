/*
 * blkparse formatting: blkparse's default line for each event (already in the order blkparse prints
 * them) and its counters per (device, CPU) and per device, in one pass (parse.py renders -f/-F formats
 * and the totals blocks from the same counters).
 */
#include "tracecore.h"

/* per (device, cpu) counters, in this order (ioscope/tools/parse/blkparse.py:CPU_FIELDS) */
enum {
	S_QREADS, S_QWRITES, S_CREADS, S_CWRITES, S_MREADS, S_MWRITES, S_IREADS, S_IWRITES, S_RRQUEUE, S_WRQUEUE,
	S_QREAD_KB, S_QWRITE_KB, S_CREAD_KB, S_CWRITE_KB, S_QREAD_B, S_QWRITE_B, S_CREAD_B, S_CWRITE_B,
	S_IREAD_KB, S_IWRITE_KB, S_MREAD_KB, S_MWRITE_KB, S_MREAD_B, S_MWRITE_B, S_IREAD_B, S_IWRITE_B,
	S_IO_UNPLUGS, S_TIMER_UNPLUGS, S_NELEMS, S_NFIELDS
};
/* per device (DEV_FIELDS) */
enum { D_CUR_R, D_CUR_W, D_MAX_R, D_MAX_W, D_EVENTS, D_FIRST, D_LAST, D_NFIELDS };

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

/* a writable C-contiguous int64 array of `ndim` dimensions, the last of `last` entries */
static int get_counters(PyObject *obj, Py_buffer *b, int ndim, Py_ssize_t last, const char *what)
{
	if (PyObject_GetBuffer(obj, b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
		return -1;
	const char *f = b->format;
	if (f && (*f == '<' || *f == '=' || *f == '@'))
		f++;
	if (b->ndim != ndim || b->itemsize != 8 || !f || (strcmp(f, "l") && strcmp(f, "q")) || b->shape[ndim - 1] != last) {
		PyErr_Format(PyExc_ValueError, "%s: expected a %d-dimensional int64 array whose last axis has %zd entries",
			     what, ndim, last);
		PyBuffer_Release(b);
		return -1;
	}
	return 0;
}

/*
 * format_blkparse(events, *, rel, seq, devidx, pidx, names, mask, cpustats, devstats, text=True,
 *                 cgroups=False) -> bytes
 *
 * events: EVENT records in the order blkparse prints them (no process notes); rel (int64): each one's
 * time from blkparse's time zero; seq (uint32): its sequence number; devidx (int32): the totals block
 * it counts in (cpustats[devidx][cpu], devstats[devidx]); pidx (int32): its process's name in names
 * (bytes, or None for a pid blkparse has no name for: printed "(null)", as glibc prints a NULL %s).
 * Counters are updated in place (cpustats: int64 [blocks][cpus][S_NFIELDS], devstats: int64
 * [blocks][D_NFIELDS]); events outside mask (category bits) are counted but not printed; actions
 * blkparse prints nothing for (driver data, unknown) are counted only. text=False: count, print nothing.
 * cgroups: a Q that carries its bio's cgroup (EV_CGROUP) has the id before its action, LOW32,HIGH32 in
 * hex, as the kernel's blk tracer prints it with blk_cgroup (parse -G). cpucol (int32, optional): the
 * cpustats column each event counts in (default its cpu): the caller numbers the CPUs it has seen, so that
 * the counters grow with the CPUs a file has, not with the largest number in it.
 */
PyObject *tc_format_blkparse(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"events", "rel", "seq", "devidx", "pidx", "names", "mask", "cpustats", "devstats",
				 "text", "cgroups", "cpucol", NULL};
	PyObject *oev, *o[4] = {NULL}, *names = NULL, *omask = NULL, *ocs = NULL, *ods = NULL, *ocol = Py_None;
	unsigned long mask;
	int text = 1, cgroups = 0;
	Py_buffer bev, b[4], bcs, bds, bcol;
	static const Py_ssize_t sz[4] = {8, 4, 4, 4};
	static const char *what[4] = {"rel", "seq", "devidx", "pidx"};
	int got = 0, have_ev = 0, have_cs = 0, have_ds = 0, have_col = 0;
	Py_ssize_t n;
	PyObject *res = NULL;
	sbuf_t sb = {0};

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OOOOO!OOOppO", kwlist, &oev, &o[0], &o[1], &o[2], &o[3],
					 &PyList_Type, &names, &omask, &ocs, &ods, &text, &cgroups, &ocol))
		return NULL;
	if (!o[0] || !o[1] || !o[2] || !o[3] || !names || !omask || !ocs || !ods) {
		PyErr_SetString(PyExc_TypeError, "format_blkparse() needs rel, seq, devidx, pidx, names, mask, cpustats "
				"and devstats (keyword arguments)");
		return NULL;
	}
	mask = PyLong_AsUnsignedLong(omask);
	if (PyErr_Occurred())
		return NULL;
	if (tc_get_events(oev, &bev, &n) < 0)
		return NULL;
	have_ev = 1;
	for (got = 0; got < 4; got++)
		if (tc_get_buf(o[got], &b[got], sz[got], n, what[got]) < 0)
			goto out;
	if (get_counters(ocs, &bcs, 3, S_NFIELDS, "cpustats") < 0)
		goto out;
	have_cs = 1;
	if (get_counters(ods, &bds, 2, D_NFIELDS, "devstats") < 0)
		goto out;
	have_ds = 1;
	if (ocol != Py_None) {
		if (tc_get_buf(ocol, &bcol, 4, n, "cpucol") < 0)
			goto out;
		have_col = 1;
	}
	const int32_t *col = have_col ? bcol.buf : NULL;
	const event_t *ev = bev.buf;
	const int64_t *t = b[0].buf;
	const uint32_t *seq = b[1].buf;
	const int32_t *devidx = b[2].buf, *pidx = b[3].buf;
	int64_t *cs = bcs.buf, *ds = bds.buf;
	Py_ssize_t nblocks = bcs.shape[0], ncpus = bcs.shape[1], ncomms = PyList_GET_SIZE(names);
	if (bds.shape[0] < nblocks) {
		PyErr_SetString(PyExc_ValueError, "devstats has fewer blocks than cpustats");
		goto out;
	}
	for (Py_ssize_t k = 0; k < ncomms; k++) {
		PyObject *x = PyList_GET_ITEM(names, k);
		if (x != Py_None && !PyBytes_Check(x)) {
			PyErr_SetString(PyExc_TypeError, "names: bytes or None");
			goto out;
		}
	}
	for (Py_ssize_t k = 0; k < n; k++) {
		int64_t ck = col ? col[k] : ev[k].cpu;
		if (devidx[k] < 0 || devidx[k] >= nblocks || ck < 0 || ck >= ncpus || pidx[k] < 0 || pidx[k] >= ncomms) {
			PyErr_SetString(PyExc_ValueError, "block, cpu or process index out of range");
			goto out;
		}
	}
	for (Py_ssize_t k = 0; k < n && !sb.oom; k++) {
		const event_t *e = &ev[k];
		int64_t *c = cs + ((size_t)devidx[k] * ncpus + (size_t)(col ? col[k] : e->cpu)) * S_NFIELDS;
		int64_t *d = ds + (size_t)devidx[k] * D_NFIELDS;
		d[D_LAST] = t[k];
		c[S_NELEMS]++;
		if (!(e->category & mask))
			continue;
		if (!d[D_EVENTS])
			d[D_FIRST] = t[k];
		d[D_EVENTS]++;
		int w = (e->category & TC_WRITE_) != 0, a = e->action;
		uint32_t nb = e->bytes;
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
		fill_rwbs(rw, e->category, nb);
		PyObject *nm = PyList_GET_ITEM(names, pidx[k]);
		const char *name = nm == Py_None ? "(null)" : PyBytes_AS_STRING(nm);
		char cg[24] = "";
		if (cgroups && a == A_QUEUE && (e->flags & EV_CGROUP))
			sprintf(cg, "%x,%x ", (unsigned)(e->aux & 0xffffffffu), (unsigned)(e->aux >> 32));
		sb_reserve(&sb, 184 + strlen(name));
		if (sb.oom)
			break;
		char *q = sb.p + sb.n;
		int len = sprintf(q, "%3u,%-3u %2u %8u %5lld.%09lld %5u %s%2s %3s ", e->dev >> 20, e->dev & 0xfffff,
				  e->cpu, seq[k], (long long)(t[k] / 1000000000), (long long)(t[k] % 1000000000), e->pid, cg,
				  letters, rw);
		unsigned nsec = nb >> 9;
		unsigned long long sec = (unsigned long long)e->sector;
		switch (a) {
		case A_REQUEUE: case A_COMPLETE:
			len += nsec ? sprintf(q + len, "%llu + %u [%u]\n", sec, nsec, e->error)
				    : sprintf(q + len, "%llu [%u]\n", sec, e->error);
			break;
		case A_PLUG:
			len += sprintf(q + len, "[%s]\n", name);
			break;
		case A_UNPLUG_IO: case A_UNPLUG_TIMER:
			len += sprintf(q + len, "[%s] %u\n", name, (unsigned)(e->aux & 0xffffffffu));
			break;
		case A_REMAP:
			len += sprintf(q + len, "%llu + %u <- (%u,%u) %llu\n", sec, nsec, e->aux_dev >> 20, e->aux_dev & 0xfffff,
				       (unsigned long long)e->aux);
			break;
		case A_SPLIT:
			len += sprintf(q + len, "%llu / %u [%s]\n", sec, (unsigned)(e->aux & 0xffffffffu), name);
			break;
		default:
			len += nsec ? sprintf(q + len, "%llu + %u [%s]\n", sec, nsec, name) : sprintf(q + len, "[%s]\n", name);
		}
		sb.n += (size_t)len;
	}
	res = sb.oom ? PyErr_NoMemory() : PyBytes_FromStringAndSize(sb.p ? sb.p : "", (Py_ssize_t)sb.n);
out:
	free(sb.p);
	if (have_ev)
		PyBuffer_Release(&bev);
	for (int i = 0; i < got; i++)
		PyBuffer_Release(&b[i]);
	if (have_cs)
		PyBuffer_Release(&bcs);
	if (have_ds)
		PyBuffer_Release(&bds);
	if (have_col)
		PyBuffer_Release(&bcol);
	return res;
}
