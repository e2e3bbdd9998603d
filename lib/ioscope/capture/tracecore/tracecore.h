/*
 * ioscope.capture._tracecore: the sequential loops of the offline tools, in C (one extension built from
 * the files of this directory; module.c is its entry point).
 *
 *   scan.c      blktrace record scanning: find the records of a stream, gather their fixed parts
 *   bios.c      the pairing engine (bios.h): which bio each event belongs to, under the kernel agg
 *               object's rules; every pairing in user space goes through it (Bios: agg -r, snoop)
 *   pairing.c   Core: report's pairing: ioscope's view on the engine (phases, per-I/O records, remaps
 *               on their target) and btt's view (bttsim.c) fed from the same loop, and how they differ
 *   bttsim.c    btt's own rules, to the byte: its devices, processes, pairing and every number it prints
 *   rbtree.c    btt's red-black trees: the tree of Qs in flight and the trees of seek distances
 *   blkparse.c  blkparse's default lines and its per-CPU / per-device counters
 *   pack.c      the capture writer's hot loop: EVENT rows into Arrow columns, checksum and counts
 */
#ifndef IOSCOPE_TRACECORE_H
#define IOSCOPE_TRACECORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT64_MAX

enum {  /* blktrace action codes */
	A_QUEUE = 1, A_BACKMERGE, A_FRONTMERGE, A_GETRQ, A_SLEEPRQ, A_REQUEUE, A_ISSUE, A_COMPLETE,
	A_PLUG, A_UNPLUG_IO, A_UNPLUG_TIMER, A_INSERT, A_SPLIT, A_BOUNCE, A_REMAP
};

/* blktrace category bits (the action word's high half, shifted down) */
#define TC_READ_ (1 << 0)
#define TC_WRITE_ (1 << 1)
#define TC_FLUSH_ (1 << 2)
#define TC_SYNC_ (1 << 3)
#define TC_PC_ (1 << 9)
#define TC_NOTIFY_ (1 << 10)
#define TC_AHEAD_ (1 << 11)
#define TC_META_ (1 << 12)
#define TC_DISCARD_ (1 << 13)
#define TC_FUA_ (1 << 15)

#define EV_NOTE_PROCESS 1   /* events.py: a process note (its name in sector and aux) */
#define EV_CGROUP 4         /* events.py: a queue event whose aux is its bio's cgroup id */

/* struct trace_event (bpf/trace_event.h, events.py:EVENT): 56 bytes, no padding */
#pragma pack(push, 1)
typedef struct {
	uint64_t ts, sector, aux;
	uint32_t bytes, dev, aux_dev, pid, tgid;
	uint16_t cpu, error, action, category;
	uint32_t flags;
} event_t;
#pragma pack(pop)
_Static_assert(sizeof(event_t) == 56, "struct trace_event is 56 bytes");

/* btt's BIT_TIME(): ns -> seconds as a double, whole seconds and the rest converted apart */
static inline double bit_time(uint64_t t)
{
	return (double)(t / 1000000000ULL) + (double)(t % 1000000000ULL) / 1.0e9;
}

/* btt's tdelta(): a delta that is zero or negative counts as 1 ns */
static inline uint64_t tdelta(uint64_t from, uint64_t to)
{
	return from < to ? to - from : 1;
}

/* grow *arr (of *n items of size bytes) to at least want items, the new ones zeroed; -1 when out of memory */
static inline int tc_grow(void *arr, size_t *n, size_t want, size_t size)
{
	void **p = (void **)arr;
	if (want <= *n)
		return 0;
	char *q = realloc(*p, want * size);
	if (!q)
		return -1;
	memset(q + *n * size, 0, (want - *n) * size);
	*p = q;
	*n = want;
	return 0;
}

/* room for item n in *arr (capacity *cap items of size bytes, doubled from first); -1 when out of memory */
static inline int tc_room(void *arr, size_t *cap, size_t n, size_t size, size_t first)
{
	void **p = (void **)arr;
	if (n < *cap)
		return 0;
	size_t c = *cap ? *cap * 2 : first;
	void *q = realloc(*p, c * size);
	if (!q)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

/* a C-contiguous buffer of exactly n items of itemsize bytes (what says which argument is wrong) */
int tc_get_buf(PyObject *obj, Py_buffer *b, Py_ssize_t itemsize, Py_ssize_t n, const char *what);
/* the same for an EVENT array: n events */
int tc_get_events(PyObject *obj, Py_buffer *b, Py_ssize_t *n);

/* scan.c */
PyObject *tc_scan_blktrace(PyObject *self, PyObject *args);
PyObject *tc_gather_blktrace(PyObject *self, PyObject *args);
/* blkparse.c */
PyObject *tc_format_blkparse(PyObject *self, PyObject *args, PyObject *kw);
/* pack.c */
PyObject *tc_pack_events(PyObject *self, PyObject *args);
/* pairing.c */
extern PyTypeObject tc_CoreType;
/* bios.c */
extern PyTypeObject tc_BiosType;

#endif
