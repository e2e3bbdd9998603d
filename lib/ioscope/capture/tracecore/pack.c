#include "tracecore.h"

/*
 * Event packing: the capture writer's hot loop. Rows of struct trace_event
 *    (56 bytes, events.py:EVENT), optionally taken in the order of an index
 *    array, become the 13 columns of an Arrow record batch in one pass; the
 *    chunk checksum (capture.py:checksum: the sum of the rows' 64-bit words
 *    and their sum weighted by 1, 3, 5, ... in output order, both mod 2^64)
 *    and the count of rows per action code come out of the same pass.
 */

PyObject *tc_pack_events(PyObject *self, PyObject *args)
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

