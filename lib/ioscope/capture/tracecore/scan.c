/*
 * blktrace record scanning: each record's length depends on the one before it (48 bytes and its
 * payload), so finding the records of a stream is one sequential walk; the records' fixed parts and
 * first payload bytes are then gathered into a regular array that numpy reads (blktrace.py).
 */
#include "tracecore.h"

#define BT_MAGIC 0x65617400u
#define BT_VERSION 0x07u

static inline uint32_t rd32(const uint8_t *p, int swap)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return swap ? __builtin_bswap32(v) : v;
}

static inline uint64_t rd64(const uint8_t *p, int swap)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return swap ? __builtin_bswap64(v) : v;
}

static inline uint16_t rd16(const uint8_t *p, int swap)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return swap ? __builtin_bswap16(v) : v;
}

/*
 * scan_blktrace(buf, swap, final) -> (offsets: bytes of int64, end, status, bad_offset, bad_value)
 * status: 0 all records complete; 1 the last record is incomplete (needs more data, or the
 * stream was cut when final); 2 bad magic at bad_offset; 3 unsupported version at bad_offset; 4 a time of
 * 2^63 ns or more (bad_value; 292 years: no kernel clock reaches it, and the readers' signed nanoseconds
 * would overflow) at bad_offset.
 * With status 1, bad_offset is where the incomplete record starts and bad_value is 0 when
 * its 48-byte header is cut, else its payload length.
 */
PyObject *tc_scan_blktrace(PyObject *self, PyObject *args)
{
	Py_buffer b;
	int swap, final;
	if (!PyArg_ParseTuple(args, "y*pp", &b, &swap, &final))
		return NULL;
	const uint8_t *p = b.buf;
	size_t len = (size_t)b.len, off = 0, n = 0;
	int64_t *offs = malloc((len / 48 + 1) * sizeof(int64_t));
	int status = 0;
	unsigned long long bad_off = 0, bad_val = 0;
	if (!offs) {
		PyBuffer_Release(&b);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	while (off < len) {
		if (len - off < 48) {
			status = 1;
			bad_off = off;
			bad_val = 0;
			break;
		}
		uint32_t magic = rd32(p + off, swap);
		if ((magic & 0xffffff00u) != BT_MAGIC) {
			status = 2;
			bad_off = off;
			bad_val = magic;
			break;
		}
		if ((magic & 0xffu) != BT_VERSION) {
			status = 3;
			bad_off = off;
			bad_val = magic & 0xffu;
			break;
		}
		uint64_t t = rd64(p + off + 8, swap);
		if (t >> 63) {
			status = 4;
			bad_off = off;
			bad_val = t;
			break;
		}
		uint16_t plen = rd16(p + off + 46, swap);
		if (len - off - 48 < plen) {
			status = 1;
			bad_off = off;
			bad_val = plen;
			break;
		}
		offs[n++] = (int64_t)off;
		off += 48 + (size_t)plen;
	}
	Py_END_ALLOW_THREADS
	(void)final;
	PyObject *ob = PyBytes_FromStringAndSize((const char *)offs, (Py_ssize_t)(n * sizeof(int64_t)));
	free(offs);
	PyBuffer_Release(&b);
	if (!ob)
		return NULL;
	return Py_BuildValue("(NKiKK)", ob, (unsigned long long)off, status, bad_off, bad_val);
}

/* gather_blktrace(buf, offsets) -> bytes: 64 per record, the 48-byte header then the first
 * 16 payload bytes (zeros past the payload's end) */
PyObject *tc_gather_blktrace(PyObject *self, PyObject *args)
{
	Py_buffer b, o;
	int swap;
	if (!PyArg_ParseTuple(args, "y*y*p", &b, &o, &swap))
		return NULL;
	size_t n = (size_t)o.len / sizeof(int64_t);
	const int64_t *offs = o.buf;
	const uint8_t *p = b.buf;
	PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 64));
	if (!out) {
		PyBuffer_Release(&b);
		PyBuffer_Release(&o);
		return NULL;
	}
	uint8_t *q = (uint8_t *)PyBytes_AS_STRING(out);
	int bad = 0;
	Py_BEGIN_ALLOW_THREADS
	for (size_t i = 0; i < n; i++) {
		size_t off = (size_t)offs[i];
		if (offs[i] < 0 || off > (size_t)b.len || (size_t)b.len - off < 48) {   /* off + 48 may wrap */
			bad = 1;
			break;
		}
		uint16_t plen = rd16(p + off + 46, swap);
		size_t avail = (size_t)b.len - off - 48;
		size_t take = plen < 16 ? plen : 16;
		if (take > avail)
			take = avail;
		memcpy(q + i * 64, p + off, 48);
		memcpy(q + i * 64 + 48, p + off + 48, take);
		memset(q + i * 64 + 48 + take, 0, 16 - take);
	}
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);
	PyBuffer_Release(&o);
	if (bad) {
		Py_DECREF(out);
		PyErr_SetString(PyExc_ValueError, "record offset past the end of the buffer");
		return NULL;
	}
	return out;
}


