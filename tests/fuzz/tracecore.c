/*
 * libFuzzer target "tracecore": the C readers of a blktrace stream (lib/ioscope/capture/tracecore), as the
 * Python readers call them, under ASan and UBSan.
 *
 * The input is blktrace bytes, after one byte of settings: bit 0 the byte order (scan and gather swap), bit 1
 * a time zero for Core, bit 2 btt's view off. The records are found and gathered (scan.c), turned into EVENT
 * records as capture/blktrace.py decode() turns them (a notify record's process note, a remap's devices,
 * a split's or an unplug's payload), then fed in their order to the pairing engine (Bios, bios.c), to report's
 * Core (pairing.c: ioscope's and btt's views, bttsim.c, rbtree.c) with its per-I/O records, and to
 * blkparse's lines (blkparse.c). The calls with Python objects go through an embedded CPython.
 *
 * Build and run: scripts/fuzz.sh tracecore [SECONDS] (tests/fuzz/build.py fuzzer tracecore).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "tracecore.h"

PyMODINIT_FUNC PyInit__tracecore(void);

static PyObject *drive;

/* the calls, as btt.py, bios.py and blkparse.py make them (memoryview casts stand for numpy arrays) */
static const char DRIVER[] =
	"import _tracecore as tc\n"
	"def arr(b, fmt, shape=None):\n"
	"    m = memoryview(b).cast('B')\n"
	"    return m.cast(fmt, shape) if shape else m.cast(fmt)\n"
	"def drive(ev, dev, aux, proc, pidx, col, ndev, ncpu, nproc, tz, btt):\n"
	"    b = tc.Bios()\n"
	"    b.set_machine(0x800000, True)\n"
	"    b.feed(ev)\n"
	"    b.expire(1 << 40)\n"
	"    b.in_flight(); b.requests(0x800000); b.unpaired; b.last_ts\n"
	"    c = tc.Core()\n"
	"    if tz: c.set_time_zero(1000)\n"
	"    c.set_io_records(True)\n"
	"    if not btt: c.set_btt(False)\n"
	"    for i in range(ndev): c.set_remapper(i, i == 1)\n"
	"    half = len(ev) // 112 * 56\n"
	"    for lo, hi in ((0, half), (half, len(ev))):\n"
	"        n = (hi - lo) // 56\n"
	"        c.feed(ev[lo:hi], dev=arr(dev, 'i')[lo // 56:hi // 56], auxdev=arr(aux, 'i')[lo // 56:hi // 56],\n"
	"               proc=arr(proc, 'i')[lo // 56:hi // 56])\n"
	"        c.take_io(); c.min_ord()\n"
	"    c.io_flush(); c.take_io()\n"
	"    c.devices()\n"
	"    if btt: c.btt()\n"
	"    n = len(ev) // 56\n"
	"    rel = bytearray(8 * n); seq = bytearray(4 * n)\n"
	"    cs = bytearray(8 * max(ndev, 1) * ncpu * 29); ds = bytearray(8 * max(ndev, 1) * 7)\n"
	"    tc.format_blkparse(ev, rel=arr(rel, 'q'), seq=arr(seq, 'I'), devidx=arr(dev, 'i'), pidx=arr(pidx, 'i'),\n"
	"                       names=[b'fuzz', None] + [b'p%d' % i for i in range(nproc)], mask=0xffff,\n"
	"                       cpustats=arr(cs, 'q', [max(ndev, 1), ncpu, 29]), devstats=arr(ds, 'q', [max(ndev, 1), 7]),\n"
	"                       cgroups=True, cpucol=arr(col, 'i'))\n";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	PyConfig config;
	PyConfig_InitIsolatedConfig(&config);
	PyConfig_SetBytesString(&config, &config.home, PYHOME);
	config.install_signal_handlers = 0;
	PyImport_AppendInittab("_tracecore", PyInit__tracecore);
	if (PyStatus_Exception(Py_InitializeFromConfig(&config)))
		abort();
	PyConfig_Clear(&config);
	PyObject *g = PyDict_New();
	PyDict_SetItemString(g, "__builtins__", PyEval_GetBuiltins());
	PyObject *r = PyRun_String(DRIVER, Py_file_input, g, g);
	if (!r) {
		PyErr_Print();
		abort();
	}
	Py_DECREF(r);
	drive = PyDict_GetItemString(g, "drive");
	Py_INCREF(drive);
	return 0;
}

static uint32_t rd32(const uint8_t *p, int swap)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return swap ? __builtin_bswap32(v) : v;
}

static uint64_t rd64(const uint8_t *p, int swap)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return swap ? __builtin_bswap64(v) : v;
}

/* a small dense index of values (devices, pids), -1 past the first max */
static int32_t dense(uint32_t *tab, int32_t *n, int32_t max, uint32_t v)
{
	for (int32_t i = 0; i < *n; i++)
		if (tab[i] == v)
			return i;
	if (*n == max)
		return -1;
	tab[*n] = v;
	return (*n)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int swap = data[0] & 1, tz = (data[0] >> 1) & 1, btt = !((data[0] >> 2) & 1);
	PyObject *buf = PyBytes_FromStringAndSize((const char *)data + 1, (Py_ssize_t)size - 1);
	PyObject *res = PyObject_CallMethod(PyImport_AddModule("_tracecore"), "scan_blktrace", "Oii", buf, swap, 1);
	if (!res) {
		PyErr_Print();
		abort();   /* scan takes any bytes */
	}
	PyObject *offs = PyTuple_GET_ITEM(res, 0);
	Py_ssize_t n = PyBytes_GET_SIZE(offs) / 8;
	PyObject *rows = PyObject_CallMethod(PyImport_AddModule("_tracecore"), "gather_blktrace", "OOi", buf, offs, swap);
	if (!rows) {
		PyErr_Print();
		abort();   /* the offsets scan gave are inside the buffer */
	}
	const uint8_t *r = (const uint8_t *)PyBytes_AS_STRING(rows);
	event_t *ev = calloc((size_t)n + 1, sizeof(*ev));
	int32_t *dev = calloc((size_t)n + 1, 4), *aux = calloc((size_t)n + 1, 4), *proc = calloc((size_t)n + 1, 4),
		*pidx = calloc((size_t)n + 1, 4);
	uint32_t devs[8], pids[32];
	int32_t ndev = 0, nproc = 0;
	for (Py_ssize_t i = 0; i < n; i++, r += 64) {
		event_t *e = &ev[i];
		uint32_t action = rd32(r + 28, swap), code = action & 0xff, cat = action >> 16;
		uint16_t plen;
		memcpy(&plen, r + 46, 2);
		plen = swap ? __builtin_bswap16(plen) : plen;
		e->ts = rd64(r + 8, swap);
		e->sector = rd64(r + 16, swap);
		e->bytes = rd32(r + 24, swap);
		e->pid = e->tgid = rd32(r + 32, swap);
		e->dev = rd32(r + 36, swap);
		e->cpu = (uint16_t)rd32(r + 40, swap);
		memcpy(&e->error, r + 44, 2);
		e->category = (uint16_t)cat;
		e->action = (cat & TC_NOTIFY_) ? 0 : (uint16_t)code;
		if (cat & TC_NOTIFY_) {
			if ((action & 0xffff) == 0) {   /* a process note: its name in sector and aux */
				e->flags = EV_NOTE_PROCESS;
				memcpy(&e->sector, r + 48, 8);
				memcpy(&e->aux, r + 56, 8);
				e->bytes = 0;
			} else if ((action & 0xffff) == 2) {
				e->flags = 2;   /* EV_MESSAGE */
			}
		} else if ((code == A_UNPLUG_IO || code == A_UNPLUG_TIMER || code == A_SPLIT) && plen >= 8) {
			e->aux = rd64(r + 48, 1);   /* these payloads are big-endian in either file order */
		} else if (code == A_REMAP && plen >= 16) {
			uint32_t from, to;
			memcpy(&from, r + 48, 4);
			memcpy(&to, r + 52, 4);
			e->aux_dev = __builtin_bswap32(from);
			e->dev = __builtin_bswap32(to);
			memcpy(&e->aux, r + 56, 8);
			e->aux = __builtin_bswap64(e->aux);
		} else if ((code & 0x100) && plen >= 8) {   /* a Q's cgroup id */
			e->flags = EV_CGROUP;
			e->aux = rd64(r + 48, swap);
		}
		dev[i] = dense(devs, &ndev, 8, e->dev);
		aux[i] = e->action == A_REMAP ? dense(devs, &ndev, 8, e->aux_dev) : -1;
		if (aux[i] < 0)
			aux[i] = dev[i];
		int32_t p = dense(pids, &nproc, 32, e->pid);
		proc[i] = p < 0 ? 0 : p;
		pidx[i] = p < 0 ? 1 : p + 2;
	}
	/* format_blkparse's counters are [devices][columns]: a column per CPU seen (cpucol), as blkparse.py
	 * numbers them; past 64 CPUs, the events of the rest count in the last column */
	int32_t *col = calloc((size_t)n + 1, 4);
	uint32_t cpus[64];
	int32_t ncol = 0;
	for (Py_ssize_t i = 0; i < n; i++) {
		int32_t k = dense(cpus, &ncol, 64, ev[i].cpu);
		col[i] = k < 0 ? 63 : k;
		if (dev[i] < 0)
			dev[i] = 0;
	}
	PyObject *evb = PyBytes_FromStringAndSize((const char *)ev, (Py_ssize_t)(n * sizeof(*ev)));
	PyObject *out = PyObject_CallFunction(drive, "Oy#y#y#y#y#iiiii", evb, (const char *)dev, (Py_ssize_t)(4 * n),
					      (const char *)aux, (Py_ssize_t)(4 * n), (const char *)proc, (Py_ssize_t)(4 * n),
					      (const char *)pidx, (Py_ssize_t)(4 * n), (const char *)col, (Py_ssize_t)(4 * n),
					      ndev, 64, nproc, tz, btt);
	if (!out) {   /* the readers raise only MemoryError, and these inputs are small: any exception is a bug */
		PyErr_Print();
		abort();
	}
	Py_DECREF(out);
	Py_DECREF(evb);
	free(ev);
	free(dev);
	free(aux);
	free(proc);
	free(pidx);
	free(col);
	Py_DECREF(rows);
	Py_DECREF(res);
	Py_DECREF(buf);
	return 0;
}
