/*
 * The module ioscope.capture._tracecore: its functions, the Core type, the buffer helpers every part
 * uses (tracecore.h lists the parts). Typed interface: ../_tracecore.pyi.
 */
#include "tracecore.h"

int tc_module_sizes(PyObject *m);   /* pairing.c: REC_SIZE, IOREC_SIZE */
int tc_bios_sizes(PyObject *m);     /* bios.c: BIOREC_SIZE */

int tc_get_buf(PyObject *obj, Py_buffer *b, Py_ssize_t itemsize, Py_ssize_t n, const char *what)
{
	if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS) < 0)
		return -1;
	if (b->len != itemsize * n) {
		PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes (%zd items of %zd), got %zd", what, itemsize * n, n,
			     itemsize, b->len);
		PyBuffer_Release(b);
		return -1;
	}
	return 0;
}

int tc_get_events(PyObject *obj, Py_buffer *b, Py_ssize_t *n)
{
	if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS) < 0)
		return -1;
	if (b->len % (Py_ssize_t)sizeof(event_t)) {
		PyErr_SetString(PyExc_ValueError, "events: not a whole number of 56-byte EVENT records");
		PyBuffer_Release(b);
		return -1;
	}
	*n = b->len / (Py_ssize_t)sizeof(event_t);
	return 0;
}

static PyMethodDef mod_methods[] = {
	{"pack_events", tc_pack_events, METH_VARARGS,
	 "pack_events(rows, order=None) -> ([13 column bytes], sum, weighted sum, per-action counts (32 x u64))"},
	{"format_blkparse", (PyCFunction)(void (*)(void))tc_format_blkparse, METH_VARARGS | METH_KEYWORDS,
	 "format_blkparse(events, *, rel, seq, devidx, pidx, names, mask, cpustats, devstats, text=True) -> bytes: "
	 "blkparse's default lines for events in its order; updates its counters in place"},
	{"scan_blktrace", tc_scan_blktrace, METH_VARARGS,
	 "scan_blktrace(buf, swap, final) -> (offsets, end, status, bad_offset, bad_value)"},
	{"gather_blktrace", tc_gather_blktrace, METH_VARARGS,
	 "gather_blktrace(buf, offsets, swap) -> 64 bytes per record: header + first 16 payload bytes"},
	{NULL}
};

static struct PyModuleDef mod = {
	PyModuleDef_HEAD_INIT, "_tracecore", "the sequential loops of ioscope's offline tools, in C", -1, mod_methods,
};

PyMODINIT_FUNC PyInit__tracecore(void)
{
	if (PyType_Ready(&tc_CoreType) < 0 || PyType_Ready(&tc_BiosType) < 0)
		return NULL;
	PyObject *m = PyModule_Create(&mod);
	if (!m)
		return NULL;
	Py_INCREF(&tc_CoreType);
	if (PyModule_AddObject(m, "Core", (PyObject *)&tc_CoreType) < 0) {
		Py_DECREF(&tc_CoreType);
		Py_DECREF(m);
		return NULL;
	}
	Py_INCREF(&tc_BiosType);
	if (PyModule_AddObject(m, "Bios", (PyObject *)&tc_BiosType) < 0) {
		Py_DECREF(&tc_BiosType);
		Py_DECREF(m);
		return NULL;
	}
	if (tc_module_sizes(m) < 0 || tc_bios_sizes(m) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
