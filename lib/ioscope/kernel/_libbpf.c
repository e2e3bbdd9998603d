// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope.kernel._libbpf: a small CPython extension over the system libbpf (>= 1.0).
 *
 * Object: open a compiled BPF object, set read-only globals, choose which
 *         programs load, resize/retype maps, load, attach, close (which
 *         detaches everything).
 * Map:    lookup/update/delete, batched dump (and dump-and-delete) with
 *         per-CPU values optionally summed as u64 lanes.
 * SlotRings: the consumer of the recorder's per-CPU rings (bpf/record.bpf.c):
 *         maps them and hands back every waiting record as one bytes
 *         object per poll. No Python code runs per event.
 * RingBuf: the consumer of a BPF ring buffer (BPF_MAP_TYPE_RINGBUF, libbpf's
 *         ring_buffer): every record waiting, concatenated, as one bytes
 *         object per poll (records of one size: fileslower's events).
 * BTF helpers: struct layouts of a compiled object, type existence and
 *         function prototype arity in the kernel's BTF.
 *
 * Every error is an OSError subclass (BPFError) with errno set and a
 * message naming the object, program or map, plus the tail of libbpf's log.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>

/* the kernel-internal ENOTSUPP some bpf(2) commands return for "not supported" */
#define ENOTSUPP_COMPAT 524

static PyObject *BPFError;

/* ---- libbpf log capture: the last bytes of libbpf's messages ---------- */

#define LOGBUF_SIZE 16384
static char logbuf[LOGBUF_SIZE];
static size_t loglen;
static int log_verbose;

static int print_fn(enum libbpf_print_level level, const char *fmt, va_list args)
{
	char line[1024], *text = line;
	va_list again;
	int n;

	if (level == LIBBPF_DEBUG && !log_verbose)
		return 0;
	va_copy(again, args);
	n = vsnprintf(line, sizeof(line), fmt, args);
	if (n >= (int)sizeof(line)) { /* the verifier's log comes as one long string */
		text = malloc((size_t)n + 1);
		if (text)
			n = vsnprintf(text, (size_t)n + 1, fmt, again);
		else {
			text = line;
			n = sizeof(line) - 1;
		}
	}
	va_end(again);
	if (n < 0)
		goto out;
	if (log_verbose)
		fputs(text, stderr);
	if ((size_t)n >= LOGBUF_SIZE / 2) { /* keep its end, where the verifier says what failed */
		memcpy(logbuf, text + n - LOGBUF_SIZE / 2, LOGBUF_SIZE / 2);
		loglen = LOGBUF_SIZE / 2;
	} else {
		if (loglen + (size_t)n >= LOGBUF_SIZE) {
			/* keep the newest half */
			size_t keep = LOGBUF_SIZE / 2;
			memmove(logbuf, logbuf + loglen - keep, keep);
			loglen = keep;
		}
		memcpy(logbuf + loglen, text, (size_t)n);
		loglen += (size_t)n;
	}
	logbuf[loglen] = '\0';
out:
	if (text != line)
		free(text);
	return 0;
}

static void log_reset(void)
{
	loglen = 0;
	logbuf[0] = '\0';
}

/* Raise BPFError(errno, "what: strerror") with libbpf's log attached as .log */
static PyObject *raise_errno(int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	PyObject *exc, *args, *log;

	if (err < 0)
		err = -err;
	if (err == 0)
		err = EINVAL;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	args = Py_BuildValue("(is)", err, msg);
	if (!args)
		return NULL;
	exc = PyObject_Call(BPFError, args, NULL);
	Py_DECREF(args);
	if (!exc)
		return NULL;
	log = PyUnicode_DecodeUTF8(logbuf, (Py_ssize_t)loglen, "replace");
	if (log) {
		PyObject_SetAttrString(exc, "log", log);
		Py_DECREF(log);
	}
	PyErr_SetObject(BPFError, exc);
	Py_DECREF(exc);
	return NULL;
}

/* ---- Object ---------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	struct bpf_object *obj;
	struct bpf_link **links;
	Py_ssize_t nlinks;
	int loaded;
	PyObject *path;
} ObjectObject;

static PyTypeObject ObjectType;
static PyTypeObject MapType;
static PyTypeObject SlotRingsType;
static PyTypeObject RingBufType;

static int object_check_open(ObjectObject *self)
{
	if (!self->obj) {
		PyErr_SetString(PyExc_ValueError, "BPF object is closed");
		return -1;
	}
	return 0;
}

static void object_close_impl(ObjectObject *self)
{
	Py_ssize_t i;

	for (i = 0; i < self->nlinks; i++)
		bpf_link__destroy(self->links[i]);
	PyMem_Free(self->links);
	self->links = NULL;
	self->nlinks = 0;
	if (self->obj) {
		bpf_object__close(self->obj);
		self->obj = NULL;
	}
}

static void object_dealloc(ObjectObject *self)
{
	object_close_impl(self);
	Py_XDECREF(self->path);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static int object_init(ObjectObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"path", "btf_path", NULL};
	const char *path, *btf_path = NULL;
	LIBBPF_OPTS(bpf_object_open_opts, opts);
	struct bpf_object *obj;
	int err;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|z", kwlist, &path, &btf_path))
		return -1;
	opts.btf_custom_path = btf_path;
	log_reset();
	obj = bpf_object__open_file(path, &opts);
	err = libbpf_get_error(obj);
	if (err) {
		raise_errno(err, "cannot open BPF object %s", path);
		return -1;
	}
	self->obj = obj;
	self->path = PyUnicode_FromString(path);
	return 0;
}

static struct bpf_program *find_prog(ObjectObject *self, const char *name)
{
	struct bpf_program *p = bpf_object__find_program_by_name(self->obj, name);

	if (!p)
		raise_errno(ENOENT, "no BPF program named %s in %s", name, bpf_object__name(self->obj));
	return p;
}

static struct bpf_map *find_map(ObjectObject *self, const char *name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(self->obj, name);

	if (!m)
		raise_errno(ENOENT, "no BPF map named %s in %s", name, bpf_object__name(self->obj));
	return m;
}

static PyObject *object_programs(ObjectObject *self, PyObject *unused)
{
	struct bpf_program *p;
	PyObject *list;

	if (object_check_open(self))
		return NULL;
	list = PyList_New(0);
	if (!list)
		return NULL;
	bpf_object__for_each_program(p, self->obj) {
		PyObject *t = Py_BuildValue("(ssO)", bpf_program__name(p), bpf_program__section_name(p),
					    bpf_program__autoload(p) ? Py_True : Py_False);
		if (!t || PyList_Append(list, t)) {
			Py_XDECREF(t);
			Py_DECREF(list);
			return NULL;
		}
		Py_DECREF(t);
	}
	return list;
}

static PyObject *object_maps(ObjectObject *self, PyObject *unused)
{
	struct bpf_map *m;
	PyObject *list;

	if (object_check_open(self))
		return NULL;
	list = PyList_New(0);
	if (!list)
		return NULL;
	bpf_object__for_each_map(m, self->obj) {
		PyObject *s = PyUnicode_FromString(bpf_map__name(m));
		if (!s || PyList_Append(list, s)) {
			Py_XDECREF(s);
			Py_DECREF(list);
			return NULL;
		}
		Py_DECREF(s);
	}
	return list;
}

static PyObject *object_set_autoload(ObjectObject *self, PyObject *args)
{
	const char *name;
	int on;
	struct bpf_program *p;
	int err;

	if (!PyArg_ParseTuple(args, "sp", &name, &on))
		return NULL;
	if (object_check_open(self) || !(p = find_prog(self, name)))
		return NULL;
	err = bpf_program__set_autoload(p, on);
	if (err)
		return raise_errno(err, "cannot set autoload of program %s", name);
	Py_RETURN_NONE;
}

static PyObject *object_set_max_entries(ObjectObject *self, PyObject *args)
{
	const char *name;
	unsigned int n;
	struct bpf_map *m;
	int err;

	if (!PyArg_ParseTuple(args, "sI", &name, &n))
		return NULL;
	if (object_check_open(self) || !(m = find_map(self, name)))
		return NULL;
	err = bpf_map__set_max_entries(m, n);
	if (err)
		return raise_errno(err, "cannot set max_entries of map %s", name);
	Py_RETURN_NONE;
}

static PyObject *object_set_map_type(ObjectObject *self, PyObject *args)
{
	const char *name;
	unsigned int type;
	struct bpf_map *m;
	int err;

	if (!PyArg_ParseTuple(args, "sI", &name, &type))
		return NULL;
	if (object_check_open(self) || !(m = find_map(self, name)))
		return NULL;
	err = bpf_map__set_type(m, (enum bpf_map_type)type);
	if (err)
		return raise_errno(err, "cannot set type of map %s", name);
	Py_RETURN_NONE;
}

/* map_flags(map) -> the map's creation flags (BPF_F_NO_PREALLOC, ...) as the object has them now */
static PyObject *object_map_flags(ObjectObject *self, PyObject *args)
{
	const char *name;
	struct bpf_map *m;

	if (!PyArg_ParseTuple(args, "s", &name))
		return NULL;
	if (object_check_open(self) || !(m = find_map(self, name)))
		return NULL;
	return PyLong_FromUnsignedLong(bpf_map__map_flags(m));
}

/* set_map_flags(map, flags): before load */
static PyObject *object_set_map_flags(ObjectObject *self, PyObject *args)
{
	const char *name;
	unsigned int flags;
	struct bpf_map *m;
	int err;

	if (!PyArg_ParseTuple(args, "sI", &name, &flags))
		return NULL;
	if (object_check_open(self) || !(m = find_map(self, name)))
		return NULL;
	err = bpf_map__set_map_flags(m, flags);
	if (err)
		return raise_errno(err, "cannot set the flags of map %s", name);
	Py_RETURN_NONE;
}

/*
 * Set a global variable in a data section (.rodata, .data, .bss) before
 * load. The variable is found through the object's BTF DATASEC, and the
 * value must have exactly the variable's size.
 */
static PyObject *object_set_global(ObjectObject *self, PyObject *args)
{
	const char *name;
	Py_buffer val;
	struct bpf_map *m;
	const struct btf *btf;

	if (!PyArg_ParseTuple(args, "sy*", &name, &val))
		return NULL;
	if (object_check_open(self))
		goto fail;
	if (self->loaded) {
		raise_errno(EBUSY, "cannot set global %s: object already loaded", name);
		goto fail;
	}
	btf = bpf_object__btf(self->obj);
	if (!btf) {
		raise_errno(ENOENT, "BPF object has no BTF; cannot find global %s", name);
		goto fail;
	}
	bpf_object__for_each_map(m, self->obj) {
		const char *mname = bpf_map__name(m);
		const char *dot = strrchr(mname, '.');
		const struct btf_type *sec;
		const struct btf_var_secinfo *vs;
		size_t size;
		const void *cur;
		void *data;
		int id, i, err;

		if (!bpf_map__is_internal(m) || !dot)
			continue;
		id = btf__find_by_name_kind(btf, dot, BTF_KIND_DATASEC);
		if (id < 0)
			continue;
		sec = btf__type_by_id(btf, id);
		vs = btf_var_secinfos(sec);
		for (i = 0; i < btf_vlen(sec); i++, vs++) {
			const struct btf_type *var = btf__type_by_id(btf, vs->type);
			const char *vname = btf__name_by_offset(btf, var->name_off);

			if (strcmp(vname, name))
				continue;
			if ((size_t)val.len != vs->size) {
				raise_errno(EINVAL, "global %s has size %u, value has %zd bytes", name, vs->size,
					    val.len);
				goto fail;
			}
			/* copy, patch, set back: the initial value is const in some libbpf versions */
			cur = bpf_map__initial_value(m, &size);
			if (!cur || vs->offset + vs->size > size) {
				raise_errno(EINVAL, "cannot reach the data of global %s", name);
				goto fail;
			}
			data = PyMem_Malloc(size);
			if (!data) {
				PyErr_NoMemory();
				goto fail;
			}
			memcpy(data, cur, size);
			memcpy((char *)data + vs->offset, val.buf, vs->size);
			err = bpf_map__set_initial_value(m, data, size);
			PyMem_Free(data);
			if (err) {
				raise_errno(err, "cannot set global %s", name);
				goto fail;
			}
			PyBuffer_Release(&val);
			Py_RETURN_NONE;
		}
	}
	raise_errno(ENOENT, "no global variable named %s in %s", name, bpf_object__name(self->obj));
fail:
	PyBuffer_Release(&val);
	return NULL;
}

/*
 * IOSCOPE_VERIFIER_STATS=1: the verifier's statistics of every program loaded
 * (instructions processed, states), one line each on stderr, also when the load
 * succeeds; how close a program is to a kernel's limits (docs/hacking.md).
 */
#define STATS_LOG_SIZE 4096

static void stats_logs(struct bpf_object *obj, char **bufs, int n, int print)
{
	struct bpf_program *p;
	int i = 0;

	bpf_object__for_each_program(p, obj) {
		if (i >= n)
			break;
		if (!print) {
			bufs[i] = bpf_program__autoload(p) ? calloc(1, STATS_LOG_SIZE) : NULL;
			if (bufs[i]) {
				bpf_program__set_log_buf(p, bufs[i], STATS_LOG_SIZE);
				bpf_program__set_log_level(p, 4); /* BPF_LOG_STATS */
			}
		} else if (bufs[i]) {
			const char *line = strstr(bufs[i], "processed ");

			fprintf(stderr, "verifier: %s: %.*s\n", bpf_program__name(p),
				line ? (int)strcspn(line, "\n") : 0, line ? line : "");
			free(bufs[i]);
		}
		i++;
	}
}

static PyObject *object_load(ObjectObject *self, PyObject *unused)
{
	int err, nprogs = 0, stats = getenv("IOSCOPE_VERIFIER_STATS") != NULL;
	struct bpf_program *p;
	char **bufs = NULL;

	if (object_check_open(self))
		return NULL;
	log_reset();
	if (stats) {
		bpf_object__for_each_program(p, self->obj)
			nprogs++;
		bufs = calloc((size_t)nprogs + 1, sizeof(*bufs));
		if (bufs)
			stats_logs(self->obj, bufs, nprogs, 0);
	}
	Py_BEGIN_ALLOW_THREADS
	err = bpf_object__load(self->obj);
	Py_END_ALLOW_THREADS
	if (bufs) {
		stats_logs(self->obj, bufs, nprogs, 1);
		free(bufs);
	}
	if (err) {
		/* name the program the verifier refused, if libbpf said which ("prog 'X': BPF program load
		 * failed"; earlier lines name other programs, in their relocations) */
		const char *fail = strstr(logbuf, "': BPF program load failed"), *p = NULL, *q;
		char which[128] = "";

		if (!fail)
			fail = strstr(logbuf, "': failed to load");
		for (q = logbuf; fail && (q = strstr(q, "prog '")) && q < fail; q++)
			p = q;
		if (p) {
			const char *q = strchr(p + 6, '\'');
			if (q && q - (p + 6) < (long)sizeof(which))
				snprintf(which, sizeof(which), " (program %.*s)", (int)(q - (p + 6)), p + 6);
		}
		return raise_errno(err, "cannot load BPF object %s%s", bpf_object__name(self->obj), which);
	}
	self->loaded = 1;
	Py_RETURN_NONE;
}

static PyObject *object_attach(ObjectObject *self, PyObject *args)
{
	const char *name;
	struct bpf_program *p;
	struct bpf_link *link, **links;
	int err;

	if (!PyArg_ParseTuple(args, "s", &name))
		return NULL;
	if (object_check_open(self) || !(p = find_prog(self, name)))
		return NULL;
	log_reset();
	link = bpf_program__attach(p);
	err = libbpf_get_error(link);
	if (err)
		return raise_errno(err, "cannot attach program %s (%s)", name, bpf_program__section_name(p));
	links = PyMem_Realloc(self->links, sizeof(*links) * (size_t)(self->nlinks + 1));
	if (!links) {
		bpf_link__destroy(link);
		return PyErr_NoMemory();
	}
	self->links = links;
	self->links[self->nlinks++] = link;
	Py_RETURN_NONE;
}

/* detach(): destroy every link (programs stop running); maps and ring buffers stay readable. */
static PyObject *object_detach(ObjectObject *self, PyObject *unused)
{
	Py_ssize_t i;

	for (i = 0; i < self->nlinks; i++)
		bpf_link__destroy(self->links[i]);
	PyMem_Free(self->links);
	self->links = NULL;
	self->nlinks = 0;
	Py_RETURN_NONE;
}

static PyObject *object_close(ObjectObject *self, PyObject *unused)
{
	object_close_impl(self);
	Py_RETURN_NONE;
}

static PyObject *object_prog_info(ObjectObject *self, PyObject *args)
{
	const char *name;
	struct bpf_program *p;
	struct bpf_prog_info info;
	__u32 len = sizeof(info);
	int fd, err;

	if (!PyArg_ParseTuple(args, "s", &name))
		return NULL;
	if (object_check_open(self) || !(p = find_prog(self, name)))
		return NULL;
	fd = bpf_program__fd(p);
	if (fd < 0)
		return raise_errno(EBADF, "program %s is not loaded", name);
	memset(&info, 0, sizeof(info));
	err = bpf_obj_get_info_by_fd(fd, &info, &len);
	if (err)
		return raise_errno(errno, "cannot read info of program %s", name);
	return Py_BuildValue("{s:I,s:K,s:K,s:K}", "id", info.id, "run_cnt", (unsigned long long)info.run_cnt,
			     "run_time_ns", (unsigned long long)info.run_time_ns, "recursion_misses",
			     (unsigned long long)info.recursion_misses);
}

static PyObject *map_new(ObjectObject *owner, struct bpf_map *m);

static PyObject *object_map(ObjectObject *self, PyObject *args)
{
	const char *name;
	struct bpf_map *m;

	if (!PyArg_ParseTuple(args, "s", &name))
		return NULL;
	if (object_check_open(self) || !(m = find_map(self, name)))
		return NULL;
	if (!self->loaded)
		return raise_errno(EBADF, "map %s is not created until the object is loaded", name);
	return map_new(self, m);
}

static PyObject *slotrings_new(ObjectObject *owner, struct bpf_map *ring, struct bpf_map *pos, unsigned nrings,
				unsigned slots);

static PyObject *object_slot_rings(ObjectObject *self, PyObject *args)
{
	const char *ring_name, *pos_name;
	unsigned nrings, slots;
	struct bpf_map *ring, *pos;

	if (!PyArg_ParseTuple(args, "ssII", &ring_name, &pos_name, &nrings, &slots))
		return NULL;
	if (object_check_open(self) || !(ring = find_map(self, ring_name)) || !(pos = find_map(self, pos_name)))
		return NULL;
	if (!self->loaded)
		return raise_errno(EBADF, "rings %s are not created until the object is loaded", ring_name);
	return slotrings_new(self, ring, pos, nrings, slots);
}

static PyObject *ringbuf_new(ObjectObject *owner, struct bpf_map *m);

static PyObject *object_ring_buffer(ObjectObject *self, PyObject *args)
{
	const char *name;
	struct bpf_map *m;

	if (!PyArg_ParseTuple(args, "s", &name))
		return NULL;
	if (object_check_open(self) || !(m = find_map(self, name)))
		return NULL;
	if (!self->loaded)
		return raise_errno(EBADF, "ring buffer %s is not created until the object is loaded", name);
	return ringbuf_new(self, m);
}

static PyObject *object_enter(ObjectObject *self, PyObject *unused)
{
	Py_INCREF(self);
	return (PyObject *)self;
}

static PyObject *object_exit(ObjectObject *self, PyObject *args)
{
	object_close_impl(self);
	Py_RETURN_FALSE;
}

static PyObject *object_get_loaded(ObjectObject *self, void *c)
{
	return PyBool_FromLong(self->loaded && self->obj);
}

static PyObject *object_get_nlinks(ObjectObject *self, void *c)
{
	return PyLong_FromSsize_t(self->nlinks);
}

static PyMethodDef object_methods[] = {
	{"programs", (PyCFunction)object_programs, METH_NOARGS, "[(name, section, autoload)]"},
	{"maps", (PyCFunction)object_maps, METH_NOARGS, "[map names]"},
	{"set_autoload", (PyCFunction)object_set_autoload, METH_VARARGS, "set_autoload(prog, bool)"},
	{"set_max_entries", (PyCFunction)object_set_max_entries, METH_VARARGS, "set_max_entries(map, n)"},
	{"map_flags", (PyCFunction)object_map_flags, METH_VARARGS, "map_flags(map) -> int"},
	{"set_map_flags", (PyCFunction)object_set_map_flags, METH_VARARGS, "set_map_flags(map, flags)"},
	{"set_map_type", (PyCFunction)object_set_map_type, METH_VARARGS, "set_map_type(map, BPF_MAP_TYPE_*)"},
	{"set_global", (PyCFunction)object_set_global, METH_VARARGS, "set_global(name, bytes) before load"},
	{"load", (PyCFunction)object_load, METH_NOARGS, "load all autoloaded programs and create maps"},
	{"attach", (PyCFunction)object_attach, METH_VARARGS, "attach(prog) by its section"},
	{"close", (PyCFunction)object_close, METH_NOARGS, "detach everything and close"},
	{"detach", (PyCFunction)object_detach, METH_NOARGS, "detach every program; maps stay readable"},
	{"prog_info", (PyCFunction)object_prog_info, METH_VARARGS, "prog_info(prog) -> dict"},
	{"map", (PyCFunction)object_map, METH_VARARGS, "map(name) -> Map"},
	{"slot_rings", (PyCFunction)object_slot_rings, METH_VARARGS,
	 "slot_rings(ring_map, pos_map, nrings, slots) -> SlotRings"},
	{"ring_buffer", (PyCFunction)object_ring_buffer, METH_VARARGS, "ring_buffer(map) -> RingBuf"},
	{"__enter__", (PyCFunction)object_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)object_exit, METH_VARARGS, NULL},
	{NULL},
};

static PyGetSetDef object_getset[] = {
	{"loaded", (getter)object_get_loaded, NULL, "True once loaded and not closed", NULL},
	{"nlinks", (getter)object_get_nlinks, NULL, "number of attached links", NULL},
	{NULL},
};

static PyTypeObject ObjectType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ioscope.kernel._libbpf.Object",
	.tp_basicsize = sizeof(ObjectObject),
	.tp_dealloc = (destructor)object_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Object(path, btf_path=None): an opened BPF object file",
	.tp_methods = object_methods,
	.tp_getset = object_getset,
	.tp_init = (initproc)object_init,
	.tp_new = PyType_GenericNew,
};

/* ---- Map ------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	ObjectObject *owner; /* keeps the object (and the fd) alive */
	int fd;
	unsigned int key_size, value_size, max_entries, type;
	int percpu;
	int ncpus;
	PyObject *name;
} MapObject;

static int is_percpu(unsigned int type)
{
	return type == BPF_MAP_TYPE_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_ARRAY ||
	       type == BPF_MAP_TYPE_LRU_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE;
}

static PyObject *map_new(ObjectObject *owner, struct bpf_map *m)
{
	MapObject *self = PyObject_New(MapObject, &MapType);

	if (!self)
		return NULL;
	Py_INCREF(owner);
	self->owner = owner;
	self->fd = bpf_map__fd(m);
	self->key_size = bpf_map__key_size(m);
	self->value_size = bpf_map__value_size(m);
	self->max_entries = bpf_map__max_entries(m);
	self->type = bpf_map__type(m);
	self->percpu = is_percpu(self->type);
	self->ncpus = self->percpu ? libbpf_num_possible_cpus() : 1;
	self->name = PyUnicode_FromString(bpf_map__name(m));
	return (PyObject *)self;
}

static void map_dealloc(MapObject *self)
{
	Py_XDECREF(self->owner);
	Py_XDECREF(self->name);
	PyObject_Free(self);
}

static int map_check(MapObject *self)
{
	if (!self->owner->obj) {
		PyErr_Format(PyExc_ValueError, "map %U: its BPF object is closed", self->name);
		return -1;
	}
	return 0;
}

/* Size of one element as user space sees it (per-CPU: one 8-aligned slot per CPU). */
static size_t map_elem_size(MapObject *self)
{
	if (self->percpu)
		return (size_t)((self->value_size + 7) & ~7u) * (size_t)self->ncpus;
	return self->value_size;
}

/* Sum per-CPU slots as u64 lanes into out (value_size bytes). */
static void sum_percpu(MapObject *self, const char *in, char *out)
{
	size_t stride = (self->value_size + 7) & ~7u;
	size_t lanes = self->value_size / 8;
	__u64 *o = (__u64 *)out;
	size_t c, l;

	memset(out, 0, self->value_size);
	for (c = 0; c < (size_t)self->ncpus; c++) {
		const __u64 *s = (const __u64 *)(in + c * stride);
		for (l = 0; l < lanes; l++)
			o[l] += s[l];
	}
}

static PyObject *map_lookup(MapObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"key", "sum", NULL};
	Py_buffer key;
	int sum = 0, err;
	size_t esz;
	PyObject *res;
	char *buf;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|p", kwlist, &key, &sum))
		return NULL;
	if (map_check(self) || (size_t)key.len != self->key_size) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_ValueError, "map %U: key must be %u bytes", self->name, self->key_size);
		PyBuffer_Release(&key);
		return NULL;
	}
	esz = map_elem_size(self);
	buf = PyMem_Malloc(esz);
	if (!buf) {
		PyBuffer_Release(&key);
		return PyErr_NoMemory();
	}
	err = bpf_map_lookup_elem(self->fd, key.buf, buf);
	PyBuffer_Release(&key);
	if (err) {
		int e = errno;
		PyMem_Free(buf);
		if (e == ENOENT)
			Py_RETURN_NONE;
		return raise_errno(e, "lookup in map %s failed", PyUnicode_AsUTF8(self->name));
	}
	if (self->percpu && sum) {
		char *out = PyMem_Malloc(self->value_size);
		if (!out) {
			PyMem_Free(buf);
			return PyErr_NoMemory();
		}
		sum_percpu(self, buf, out);
		res = PyBytes_FromStringAndSize(out, self->value_size);
		PyMem_Free(out);
	} else {
		res = PyBytes_FromStringAndSize(buf, (Py_ssize_t)esz);
	}
	PyMem_Free(buf);
	return res;
}

static PyObject *map_update(MapObject *self, PyObject *args)
{
	Py_buffer key, val;
	unsigned long long flags = BPF_ANY;
	int err;

	if (!PyArg_ParseTuple(args, "y*y*|K", &key, &val, &flags))
		return NULL;
	if (map_check(self))
		goto fail;
	if ((size_t)key.len != self->key_size || (size_t)val.len != map_elem_size(self)) {
		PyErr_Format(PyExc_ValueError, "map %U: key must be %u bytes and value %zu bytes", self->name,
			     self->key_size, map_elem_size(self));
		goto fail;
	}
	err = bpf_map_update_elem(self->fd, key.buf, val.buf, flags);
	if (err) {
		raise_errno(errno, "update of map %s failed", PyUnicode_AsUTF8(self->name));
		goto fail;
	}
	PyBuffer_Release(&key);
	PyBuffer_Release(&val);
	Py_RETURN_NONE;
fail:
	PyBuffer_Release(&key);
	PyBuffer_Release(&val);
	return NULL;
}

static PyObject *map_delete(MapObject *self, PyObject *args)
{
	Py_buffer key;
	int err, e;

	if (!PyArg_ParseTuple(args, "y*", &key))
		return NULL;
	if (map_check(self)) {
		PyBuffer_Release(&key);
		return NULL;
	}
	err = bpf_map_delete_elem(self->fd, key.buf);
	e = errno;
	PyBuffer_Release(&key);
	if (err) {
		if (e == ENOENT)
			Py_RETURN_FALSE;
		return raise_errno(e, "delete from map %s failed", PyUnicode_AsUTF8(self->name));
	}
	Py_RETURN_TRUE;
}

/*
 * dump(sum=True, delete=False) -> (keys: bytes, values: bytes, n)
 * Batched when the kernel supports it (BPF_MAP_LOOKUP[_AND_DELETE]_BATCH),
 * otherwise by get_next_key. delete=True needs a hash map: each entry is
 * removed as it is read, so counts between two dumps are never lost or
 * counted twice.
 */
static PyObject *map_dump(MapObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"sum", "delete", NULL};
	int sum = 1, del = 0, err = 0, e = 0, batched = 1;
	size_t esz, osz, cap;
	char *keys = NULL, *vals = NULL, *outv = NULL;
	size_t n = 0;
	PyObject *res = NULL;
	__u64 in_batch = 0, out_batch = 0;
	int first = 1;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pp", kwlist, &sum, &del))
		return NULL;
	if (map_check(self))
		return NULL;
	esz = map_elem_size(self);
	cap = self->max_entries ? self->max_entries : 1;
	keys = PyMem_Malloc(cap * self->key_size);
	vals = PyMem_Malloc(cap * esz);
	if (!keys || !vals) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	for (;;) {
		__u32 count = (__u32)(cap - n);
		LIBBPF_OPTS(bpf_map_batch_opts, opts);

		if (count == 0)
			break;
		if (del)
			err = bpf_map_lookup_and_delete_batch(self->fd, first ? NULL : &in_batch, &out_batch,
							      keys + n * self->key_size, vals + n * esz, &count,
							      &opts);
		else
			err = bpf_map_lookup_batch(self->fd, first ? NULL : &in_batch, &out_batch,
						   keys + n * self->key_size, vals + n * esz, &count, &opts);
		e = err ? errno : 0;
		if (err && e != ENOENT) {
			if (first && (e == EINVAL || e == ENOTSUP || e == EOPNOTSUPP || e == ENOTSUPP_COMPAT))
				batched = 0;
			break;
		}
		n += count;
		if (err) { /* ENOENT: done */
			err = 0;
			break;
		}
		in_batch = out_batch;
		first = 0;
	}
	if (!batched) {
		/* fallback: iterate keys one by one */
		char *prev = NULL;
		err = 0;
		n = 0;
		while (n < cap) {
			char *k = keys + n * self->key_size;
			if (bpf_map_get_next_key(self->fd, prev, k))
				break;
			if (bpf_map_lookup_elem(self->fd, k, vals + n * esz) == 0) {
				if (del)
					bpf_map_delete_elem(self->fd, k);
				prev = del ? NULL : k;
				n++;
			} else {
				prev = k;
			}
		}
	}
	Py_END_ALLOW_THREADS
	if (err) {
		raise_errno(e, "batched read of map %s failed", PyUnicode_AsUTF8(self->name));
		goto out;
	}
	if (self->percpu && sum) {
		size_t i;
		osz = self->value_size;
		outv = PyMem_Malloc((n ? n : 1) * osz);
		if (!outv) {
			PyErr_NoMemory();
			goto out;
		}
		for (i = 0; i < n; i++)
			sum_percpu(self, vals + i * esz, outv + i * osz);
		res = Py_BuildValue("(y#y#n)", keys, (Py_ssize_t)(n * self->key_size), outv,
				    (Py_ssize_t)(n * osz), (Py_ssize_t)n);
	} else {
		res = Py_BuildValue("(y#y#n)", keys, (Py_ssize_t)(n * self->key_size), vals,
				    (Py_ssize_t)(n * esz), (Py_ssize_t)n);
	}
out:
	PyMem_Free(keys);
	PyMem_Free(vals);
	PyMem_Free(outv);
	return res;
}

static PyObject *map_get(MapObject *self, void *which)
{
	switch ((long)which) {
	case 0: return PyLong_FromLong(self->fd);
	case 1: return PyLong_FromUnsignedLong(self->key_size);
	case 2: return PyLong_FromUnsignedLong(self->value_size);
	case 3: return PyLong_FromUnsignedLong(self->max_entries);
	case 4: return PyLong_FromUnsignedLong(self->type);
	case 5: return PyBool_FromLong(self->percpu);
	case 6: return PyLong_FromLong(self->ncpus);
	default: Py_INCREF(self->name); return self->name;
	}
}

static PyMethodDef map_methods[] = {
	{"lookup", (PyCFunction)(void (*)(void))map_lookup, METH_VARARGS | METH_KEYWORDS,
	 "lookup(key, sum=False) -> bytes or None"},
	{"update", (PyCFunction)map_update, METH_VARARGS, "update(key, value, flags=BPF_ANY)"},
	{"delete", (PyCFunction)map_delete, METH_VARARGS, "delete(key) -> bool"},
	{"dump", (PyCFunction)(void (*)(void))map_dump, METH_VARARGS | METH_KEYWORDS,
	 "dump(sum=True, delete=False) -> (keys, values, n)"},
	{NULL},
};

static PyGetSetDef map_getset[] = {
	{"fd", (getter)map_get, NULL, NULL, (void *)0},
	{"key_size", (getter)map_get, NULL, NULL, (void *)1},
	{"value_size", (getter)map_get, NULL, NULL, (void *)2},
	{"max_entries", (getter)map_get, NULL, NULL, (void *)3},
	{"type", (getter)map_get, NULL, NULL, (void *)4},
	{"percpu", (getter)map_get, NULL, NULL, (void *)5},
	{"ncpus", (getter)map_get, NULL, NULL, (void *)6},
	{"name", (getter)map_get, NULL, NULL, (void *)7},
	{NULL},
};

static PyTypeObject MapType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ioscope.kernel._libbpf.Map",
	.tp_basicsize = sizeof(MapObject),
	.tp_dealloc = (destructor)map_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A BPF map of a loaded Object",
	.tp_methods = map_methods,
	.tp_getset = map_getset,
};

#include <sys/mman.h>

/* ---- SlotRings ------------------------------------------------------- */

/*
 * Single-producer rings of fixed-size slots that BPF programs keep in two
 * BPF_F_MMAPABLE arrays (see bpf/record.bpf.c): ring r owns the slots
 * [r * slots, (r + 1) * slots) of the ring map; entry r of the position map
 * is {u64 head; 7 pad; u64 tail; 7 pad} (struct rec_ring_pos). The program
 * writes a slot, then advances head with an atomic add; the consumer copies
 * the slots between tail and head and then advances tail. Nothing wakes the
 * consumer: poll() sleeps its timeout, then takes everything.
 */

#include <time.h>

struct slot_pos {
	__u64 head;
	__u64 pad0[7];
	__u64 tail;
	__u64 pad1[7];
};

typedef struct {
	PyObject_HEAD
	ObjectObject *owner;
	char *slots_mem;
	struct slot_pos *pos;
	size_t slots_len, pos_len;
	unsigned nrings, nslots, slot_size;
	__u64 last_max; /* records taken from the fullest ring at the last poll */
	PyObject *name;
} SlotRingsObject;

static size_t page_round(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (n + page - 1) / page * page;
}

static PyObject *slotrings_new(ObjectObject *owner, struct bpf_map *ring, struct bpf_map *pos, unsigned nrings,
				unsigned slots)
{
	SlotRingsObject *self;
	unsigned vsize = bpf_map__value_size(ring);

	if (!slots || (slots & (slots - 1)) || !nrings)
		return raise_errno(EINVAL, "rings %s: slots must be a power of two, rings at least 1", bpf_map__name(ring));
	if ((size_t)nrings * slots > bpf_map__max_entries(ring) || nrings > bpf_map__max_entries(pos) ||
	    bpf_map__value_size(pos) != sizeof(struct slot_pos) || !(bpf_map__map_flags(ring) & BPF_F_MMAPABLE) ||
	    !(bpf_map__map_flags(pos) & BPF_F_MMAPABLE))
		return raise_errno(EINVAL, "rings %s: maps do not match %u rings of %u slots", bpf_map__name(ring),
				   nrings, slots);
	self = PyObject_New(SlotRingsObject, &SlotRingsType);
	if (!self)
		return NULL;
	Py_INCREF(owner);
	self->owner = owner;
	self->name = PyUnicode_FromString(bpf_map__name(ring));
	self->nrings = nrings;
	self->nslots = slots;
	self->slot_size = vsize;
	self->last_max = 0;
	self->slots_len = page_round((size_t)nrings * slots * vsize);
	self->pos_len = page_round((size_t)nrings * sizeof(struct slot_pos));
	self->pos = NULL;
	self->slots_mem = mmap(NULL, self->slots_len, PROT_READ, MAP_SHARED, bpf_map__fd(ring), 0);
	if (self->slots_mem == MAP_FAILED) {
		int err = -errno;
		self->slots_mem = NULL;
		Py_DECREF(self);
		return raise_errno(err, "cannot map rings %s", bpf_map__name(ring));
	}
	self->pos = mmap(NULL, self->pos_len, PROT_READ | PROT_WRITE, MAP_SHARED, bpf_map__fd(pos), 0);
	if (self->pos == MAP_FAILED) {
		int err = -errno;
		self->pos = NULL;
		Py_DECREF(self);
		return raise_errno(err, "cannot map ring positions %s", bpf_map__name(pos));
	}
	return (PyObject *)self;
}

static void slotrings_dealloc(SlotRingsObject *self)
{
	if (self->slots_mem)
		munmap(self->slots_mem, self->slots_len);
	if (self->pos)
		munmap(self->pos, self->pos_len);
	Py_XDECREF(self->owner);
	Py_XDECREF(self->name);
	PyObject_Free(self);
}

/* Records waiting in ring r (at most nslots: the program never overwrites). */
static __u64 slot_avail(SlotRingsObject *self, unsigned r)
{
	__u64 head = __atomic_load_n(&self->pos[r].head, __ATOMIC_ACQUIRE);
	__u64 tail = __atomic_load_n(&self->pos[r].tail, __ATOMIC_RELAXED);

	return head - tail > self->nslots ? self->nslots : head - tail;
}

/* Copy n records of ring r from its tail to out, then release them to the producer. */
static void slot_take(SlotRingsObject *self, unsigned r, __u64 n, char *out)
{
	__u64 tail = __atomic_load_n(&self->pos[r].tail, __ATOMIC_RELAXED);
	__u64 first = tail & (self->nslots - 1);
	__u64 run = n < self->nslots - first ? n : self->nslots - first;
	const char *base = self->slots_mem + (size_t)r * self->nslots * self->slot_size;

	memcpy(out, base + first * self->slot_size, run * self->slot_size);
	if (run < n)
		memcpy(out + run * self->slot_size, base, (n - run) * self->slot_size);
	__atomic_store_n(&self->pos[r].tail, tail + n, __ATOMIC_RELEASE);
}

/* poll(timeout_ms) -> bytes: sleeps timeout_ms (GIL released), then takes every record of every ring. */
static PyObject *slotrings_poll(SlotRingsObject *self, PyObject *args)
{
	int timeout = 100;
	unsigned r;
	__u64 total = 0, *n;
	PyObject *res;
	char *out;

	if (!PyArg_ParseTuple(args, "|i", &timeout))
		return NULL;
	if (!self->owner->obj) {
		PyErr_Format(PyExc_ValueError, "rings %U: their BPF object is closed", self->name);
		return NULL;
	}
	if (timeout > 0) {
		struct timespec ts = {.tv_sec = timeout / 1000, .tv_nsec = (long)(timeout % 1000) * 1000000L};

		Py_BEGIN_ALLOW_THREADS
		nanosleep(&ts, NULL);
		Py_END_ALLOW_THREADS
	}
	n = malloc(self->nrings * sizeof(*n));
	if (!n)
		return PyErr_NoMemory();
	self->last_max = 0;
	for (r = 0; r < self->nrings; r++) {
		n[r] = slot_avail(self, r);
		total += n[r];
		if (n[r] > self->last_max)
			self->last_max = n[r];
	}
	res = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(total * self->slot_size));
	if (!res) {
		free(n);
		return NULL;
	}
	out = PyBytes_AS_STRING(res);
	Py_BEGIN_ALLOW_THREADS
	for (r = 0; r < self->nrings; r++) {
		if (n[r])
			slot_take(self, r, n[r], out);
		out += n[r] * self->slot_size;
	}
	Py_END_ALLOW_THREADS
	free(n);
	return res;
}

/* pending() -> list of records waiting per ring (for tests and status). */
static PyObject *slotrings_pending(SlotRingsObject *self, PyObject *unused)
{
	PyObject *l = PyList_New(self->nrings);
	unsigned r;

	if (!l)
		return NULL;
	for (r = 0; r < self->nrings; r++)
		PyList_SET_ITEM(l, r, PyLong_FromUnsignedLongLong(slot_avail(self, r)));
	return l;
}

/* fill: the fullest ring's share of its slots when the last poll took its records (0.0-1.0). */
static PyObject *slotrings_fill(SlotRingsObject *self, void *c)
{
	return PyFloat_FromDouble((double)self->last_max / self->nslots);
}

static PyGetSetDef slotrings_getset[] = {
	{"fill", (getter)slotrings_fill, NULL, "the fullest ring's fill at the last poll (0.0-1.0)", NULL},
	{NULL},
};

static PyMethodDef slotrings_methods[] = {
	{"poll", (PyCFunction)slotrings_poll, METH_VARARGS,
	 "poll(timeout_ms=100) -> bytes: sleeps timeout_ms, then takes every record of every ring (0: no sleep)"},
	{"pending", (PyCFunction)slotrings_pending, METH_NOARGS, "pending() -> [records waiting, per ring]"},
	{NULL},
};

static PyTypeObject SlotRingsType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ioscope.kernel._libbpf.SlotRings",
	.tp_basicsize = sizeof(SlotRingsObject),
	.tp_dealloc = (destructor)slotrings_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Consumer of per-CPU single-producer slot rings kept by BPF programs in mmapable arrays",
	.tp_methods = slotrings_methods,
	.tp_getset = slotrings_getset,
};

/* ---- RingBuf ---------------------------------------------------------- */

/*
 * A BPF ring buffer through libbpf's ring_buffer: poll() takes every record waiting (the callback
 * appends each to a growing buffer, no Python per record) and returns them as one bytes object.
 */
typedef struct {
	PyObject_HEAD
	ObjectObject *owner;
	struct ring_buffer *rb;
	char *buf;
	size_t len, cap;
	int oom;
	PyObject *name;
} RingBufObject;

static int ringbuf_sample(void *ctx, void *data, size_t size)
{
	RingBufObject *self = ctx;

	if (self->len + size > self->cap) {
		size_t cap = self->cap ? self->cap : 65536;
		char *nbuf;

		while (cap < self->len + size)
			cap *= 2;
		nbuf = realloc(self->buf, cap);
		if (!nbuf) {
			self->oom = 1;
			return -ENOMEM;
		}
		self->buf = nbuf;
		self->cap = cap;
	}
	memcpy(self->buf + self->len, data, size);
	self->len += size;
	return 0;
}

static PyObject *ringbuf_new(ObjectObject *owner, struct bpf_map *m)
{
	RingBufObject *self;
	int err;

	if (bpf_map__type(m) != BPF_MAP_TYPE_RINGBUF)
		return raise_errno(EINVAL, "map %s is not a ring buffer", bpf_map__name(m));
	self = PyObject_New(RingBufObject, &RingBufType);
	if (!self)
		return NULL;
	Py_INCREF(owner);
	self->owner = owner;
	self->buf = NULL;
	self->len = self->cap = 0;
	self->oom = 0;
	self->name = PyUnicode_FromString(bpf_map__name(m));
	log_reset();
	self->rb = ring_buffer__new(bpf_map__fd(m), ringbuf_sample, self, NULL);
	if (!self->rb) {
		err = -errno;
		Py_DECREF(self);
		return raise_errno(err, "cannot open ring buffer %s", bpf_map__name(m));
	}
	return (PyObject *)self;
}

static void ringbuf_dealloc(RingBufObject *self)
{
	if (self->rb)
		ring_buffer__free(self->rb);
	free(self->buf);
	Py_XDECREF(self->owner);
	Py_XDECREF(self->name);
	PyObject_Free(self);
}

/* poll(timeout_ms=0) -> bytes: waits up to timeout_ms for a record (GIL released), then takes them all. */
static PyObject *ringbuf_poll(RingBufObject *self, PyObject *args)
{
	int timeout = 0, n;
	PyObject *res;

	if (!PyArg_ParseTuple(args, "|i", &timeout))
		return NULL;
	if (!self->owner->obj) {
		PyErr_Format(PyExc_ValueError, "ring buffer %U: its BPF object is closed", self->name);
		return NULL;
	}
	self->len = 0;
	self->oom = 0;
	Py_BEGIN_ALLOW_THREADS
	n = ring_buffer__poll(self->rb, timeout);
	if (n >= 0 && !self->oom)
		n = ring_buffer__consume(self->rb);
	Py_END_ALLOW_THREADS
	if (self->oom)
		return PyErr_NoMemory();
	if (n < 0 && n != -EINTR)
		return raise_errno(n, "cannot read ring buffer %U", self->name);
	res = PyBytes_FromStringAndSize(self->buf, (Py_ssize_t)self->len);
	self->len = 0;
	return res;
}

static PyMethodDef ringbuf_methods[] = {
	{"poll", (PyCFunction)ringbuf_poll, METH_VARARGS,
	 "poll(timeout_ms=0) -> bytes: every record waiting (waits up to timeout_ms for the first), concatenated"},
	{NULL},
};

static PyTypeObject RingBufType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ioscope.kernel._libbpf.RingBuf",
	.tp_basicsize = sizeof(RingBufObject),
	.tp_dealloc = (destructor)ringbuf_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Consumer of a BPF ring buffer (BPF_MAP_TYPE_RINGBUF)",
	.tp_methods = ringbuf_methods,
};

/* ---- BTF helpers ------------------------------------------------------ */

/* The running kernel's BTF, parsed once per process (about 20 ms each time). */
static struct btf *vmlinux_btf;

/* BTF from a file (owned by the caller), or the kernel's own (cached, not to be freed). */
static struct btf *open_btf(const char *path, int *owned)
{
	struct btf *btf;

	if (path && *path) {
		*owned = 1;
		btf = btf__parse(path, NULL);
		return libbpf_get_error(btf) ? NULL : btf;
	}
	*owned = 0;
	if (!vmlinux_btf) {
		btf = btf__load_vmlinux_btf();
		if (libbpf_get_error(btf))
			return NULL;
		vmlinux_btf = btf;
	}
	return vmlinux_btf;
}

static void close_btf(struct btf *btf, int owned)
{
	if (owned)
		btf__free(btf);
}

/* struct_layout(path, name) -> (size, [(member, offset, size), ...]) */
static PyObject *mod_struct_layout(PyObject *m, PyObject *args)
{
	const char *path, *name;
	struct btf *btf;
	const struct btf_type *t;
	const struct btf_member *mem;
	PyObject *list, *res;
	int id, i, owned;

	if (!PyArg_ParseTuple(args, "ss", &path, &name))
		return NULL;
	btf = open_btf(path, &owned);
	if (!btf)
		return raise_errno(errno, "cannot read BTF from %s", path);
	id = btf__find_by_name_kind(btf, name, BTF_KIND_STRUCT);
	if (id < 0) {
		close_btf(btf, owned);
		return raise_errno(ENOENT, "no struct %s in the BTF of %s", name, path);
	}
	t = btf__type_by_id(btf, id);
	list = PyList_New(0);
	mem = btf_members(t);
	for (i = 0; list && i < btf_vlen(t); i++, mem++) {
		PyObject *tup = Py_BuildValue("(sIn)", btf__name_by_offset(btf, mem->name_off),
					      btf_member_bit_offset(t, i) / 8,
					      (Py_ssize_t)btf__resolve_size(btf, mem->type));
		if (!tup || PyList_Append(list, tup)) {
			Py_XDECREF(tup);
			Py_CLEAR(list);
		}
		Py_XDECREF(tup);
	}
	res = list ? Py_BuildValue("(IN)", t->size, list) : NULL;
	close_btf(btf, owned);
	return res;
}

/* has_type(name, kind, btf_path=None): kind is "struct", "typedef", "enum", "func" */
static PyObject *mod_has_type(PyObject *m, PyObject *args)
{
	const char *name, *kind, *path = NULL;
	struct btf *btf;
	int k, id, owned;

	if (!PyArg_ParseTuple(args, "ss|z", &name, &kind, &path))
		return NULL;
	if (!strcmp(kind, "struct"))
		k = BTF_KIND_STRUCT;
	else if (!strcmp(kind, "typedef"))
		k = BTF_KIND_TYPEDEF;
	else if (!strcmp(kind, "enum"))
		k = BTF_KIND_ENUM;
	else if (!strcmp(kind, "func"))
		k = BTF_KIND_FUNC;
	else {
		PyErr_Format(PyExc_ValueError, "unknown BTF kind %s", kind);
		return NULL;
	}
	btf = open_btf(path, &owned);
	if (!btf)
		return raise_errno(errno, "cannot read kernel BTF%s%s", path ? " from " : "", path ? path : "");
	id = btf__find_by_name_kind(btf, name, k);
	close_btf(btf, owned);
	return PyBool_FromLong(id > 0);
}

/*
 * tp_params(tracepoint, btf_path=None) -> number of tracepoint arguments
 * (without the leading void *), from the btf_trace_<tp> typedef, or -1 when
 * the kernel has no such typedef (no tp_btf for it).
 */
static PyObject *mod_tp_params(PyObject *m, PyObject *args)
{
	const char *tp, *path = NULL;
	char name[256];
	struct btf *btf;
	const struct btf_type *t;
	int id, n = -1, owned;

	if (!PyArg_ParseTuple(args, "s|z", &tp, &path))
		return NULL;
	btf = open_btf(path, &owned);
	if (!btf)
		return raise_errno(errno, "cannot read kernel BTF%s%s", path ? " from " : "", path ? path : "");
	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	id = btf__find_by_name_kind(btf, name, BTF_KIND_TYPEDEF);
	if (id > 0) {
		t = btf__type_by_id(btf, id);
		t = btf__type_by_id(btf, t->type); /* pointer */
		if (t && btf_is_ptr(t))
			t = btf__type_by_id(btf, t->type);
		if (t && btf_is_func_proto(t))
			n = btf_vlen(t) - 1;
	}
	close_btf(btf, owned);
	return PyLong_FromLong(n);
}

/* A BTF type as C spells it in a prototype: "struct request *", "blk_status_t", "unsigned int". */
static void type_text(const struct btf *btf, __u32 id, char *buf, size_t len)
{
	const struct btf_type *t = btf__type_by_id(btf, id);
	int stars = 0;
	const char *kw = "";

	while (t && (btf_is_ptr(t) || btf_is_const(t) || btf_is_volatile(t) || btf_is_restrict(t))) {
		if (btf_is_ptr(t))
			stars++;
		t = btf__type_by_id(btf, t->type);
	}
	if (!t) {
		snprintf(buf, len, "?");
		return;
	}
	if (btf_is_struct(t))
		kw = "struct ";
	else if (btf_is_union(t))
		kw = "union ";
	else if (btf_is_enum(t))
		kw = "enum ";
	snprintf(buf, len, "%s%s%s%.*s", kw, t->name_off ? btf__name_by_offset(btf, t->name_off) : "void",
		 stars ? " " : "", stars, "****");
}

/* The C types of a function prototype's parameters, from the skip-th on, as a list of str. */
static PyObject *proto_param_types(const struct btf *btf, const struct btf_type *t, int skip)
{
	const struct btf_param *p = btf_params(t);
	PyObject *out = PyList_New(0), *s;
	char text[256];
	int i;

	for (i = skip; out && i < btf_vlen(t); i++) {
		type_text(btf, p[i].type, text, sizeof(text));
		s = PyUnicode_FromString(text);
		if (!s || PyList_Append(out, s) < 0) {
			Py_XDECREF(s);
			Py_CLEAR(out);
			break;
		}
		Py_DECREF(s);
	}
	return out;
}

/*
 * tp_param_types(tracepoint, btf_path=None) -> the C types of the tracepoint's
 * arguments (without the leading void *), e.g. ["struct request_queue *",
 * "struct bio *"], from the btf_trace_<tp> typedef; None when the kernel has
 * no such typedef. How a tracepoint's signature changed between kernels is
 * read here, not inferred from a version number.
 */
static PyObject *mod_tp_param_types(PyObject *m, PyObject *args)
{
	const char *tp, *path = NULL;
	char name[256];
	struct btf *btf;
	const struct btf_type *t;
	PyObject *out;
	int id, owned;

	if (!PyArg_ParseTuple(args, "s|z", &tp, &path))
		return NULL;
	btf = open_btf(path, &owned);
	if (!btf)
		return raise_errno(errno, "cannot read kernel BTF%s%s", path ? " from " : "", path ? path : "");
	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	id = btf__find_by_name_kind(btf, name, BTF_KIND_TYPEDEF);
	t = id > 0 ? btf__type_by_id(btf, id) : NULL;
	t = t ? btf__type_by_id(btf, t->type) : NULL;
	if (t && btf_is_ptr(t))
		t = btf__type_by_id(btf, t->type);
	if (!t || !btf_is_func_proto(t)) {
		close_btf(btf, owned);
		Py_RETURN_NONE;
	}
	out = proto_param_types(btf, t, 1);
	close_btf(btf, owned);
	return out;
}

/*
 * func_param_types(function, btf_path=None) -> the C types of a kernel
 * function's parameters (its BTF FUNC), e.g. ["struct readahead_control *",
 * "long unsigned int"]; None when the kernel's BTF has no such function (it is
 * inlined everywhere, renamed or absent: fentry cannot attach to it).
 */
static PyObject *mod_func_param_types(PyObject *m, PyObject *args)
{
	const char *fn, *path = NULL;
	struct btf *btf;
	const struct btf_type *t;
	PyObject *out;
	int id, owned;

	if (!PyArg_ParseTuple(args, "s|z", &fn, &path))
		return NULL;
	btf = open_btf(path, &owned);
	if (!btf)
		return raise_errno(errno, "cannot read kernel BTF%s%s", path ? " from " : "", path ? path : "");
	id = btf__find_by_name_kind(btf, fn, BTF_KIND_FUNC);
	t = id > 0 ? btf__type_by_id(btf, id) : NULL;
	t = t ? btf__type_by_id(btf, t->type) : NULL;
	if (!t || !btf_is_func_proto(t)) {
		close_btf(btf, owned);
		Py_RETURN_NONE;
	}
	out = proto_param_types(btf, t, 0);
	close_btf(btf, owned);
	return out;
}

/*
 * probe_fentry(function) -> 0 when an fentry program loads and attaches to the
 * kernel function, else the errno that refused it (EPERM under lockdown,
 * ENOTSUPP without ftrace direct calls, ENOENT when the function is absent,
 * ...). The probe program returns 0 and is detached before this returns.
 */
static PyObject *mod_probe_fentry(PyObject *m, PyObject *args)
{
	const struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = BPF_TRACE_FENTRY);
	const char *fn;
	struct btf *btf;
	int id, owned, fd, link, err = 0;

	if (!PyArg_ParseTuple(args, "s", &fn))
		return NULL;
	btf = open_btf(NULL, &owned);
	if (!btf)
		return PyLong_FromLong(errno ? errno : ENOENT);
	id = btf__find_by_name_kind(btf, fn, BTF_KIND_FUNC);
	if (id <= 0)
		return PyLong_FromLong(ENOENT);
	opts.attach_btf_id = (__u32)id;
	fd = bpf_prog_load(BPF_PROG_TYPE_TRACING, "ios_probe", "GPL", insns, 2, &opts);
	if (fd < 0)
		return PyLong_FromLong(-fd);
	link = bpf_raw_tracepoint_open(NULL, fd);
	if (link < 0)
		err = -link;
	else
		close(link);
	close(fd);
	return PyLong_FromLong(err);
}

/* probe_helper(name) -> whether the kernel offers a BPF helper ("loop" for bpf_loop) to programs. */
static PyObject *mod_probe_helper(PyObject *m, PyObject *args)
{
	static const struct { const char *name; enum bpf_func_id id; } helpers[] = {
		{ "loop", BPF_FUNC_loop },
	};
	const char *name;
	size_t i;
	int ret;

	if (!PyArg_ParseTuple(args, "s", &name))
		return NULL;
	for (i = 0; i < sizeof(helpers) / sizeof(helpers[0]); i++) {
		if (strcmp(helpers[i].name, name))
			continue;
		/* a base helper: any program type that can load tells */
		ret = libbpf_probe_bpf_helper(BPF_PROG_TYPE_SOCKET_FILTER, helpers[i].id, NULL);
		if (ret < 0)
			return raise_errno(-ret, "cannot probe BPF helper %s", name);
		return PyBool_FromLong(ret);
	}
	PyErr_Format(PyExc_ValueError, "unknown BPF helper %s", name);
	return NULL;
}

static PyObject *mod_set_verbose(PyObject *m, PyObject *args)
{
	int v;

	if (!PyArg_ParseTuple(args, "p", &v))
		return NULL;
	log_verbose = v;
	Py_RETURN_NONE;
}

static PyObject *mod_last_log(PyObject *m, PyObject *unused)
{
	return PyUnicode_DecodeUTF8(logbuf, (Py_ssize_t)loglen, "replace");
}

static PyObject *mod_num_possible_cpus(PyObject *m, PyObject *unused)
{
	return PyLong_FromLong(libbpf_num_possible_cpus());
}

static PyMethodDef mod_methods[] = {
	{"struct_layout", mod_struct_layout, METH_VARARGS, "struct_layout(btf_or_elf_path, struct_name)"},
	{"has_type", mod_has_type, METH_VARARGS, "has_type(name, kind, btf_path=None)"},
	{"tp_params", mod_tp_params, METH_VARARGS, "tp_params(tracepoint, btf_path=None)"},
	{"tp_param_types", mod_tp_param_types, METH_VARARGS, "tp_param_types(tracepoint, btf_path=None)"},
	{"func_param_types", mod_func_param_types, METH_VARARGS, "func_param_types(function, btf_path=None)"},
	{"probe_fentry", mod_probe_fentry, METH_VARARGS, "probe_fentry(function) -> 0 or errno"},
	{"probe_helper", mod_probe_helper, METH_VARARGS, "probe_helper(name) -> bool"},
	{"set_verbose", mod_set_verbose, METH_VARARGS, "echo libbpf's debug log to stderr"},
	{"last_log", mod_last_log, METH_NOARGS, "the tail of libbpf's log"},
	{"num_possible_cpus", mod_num_possible_cpus, METH_NOARGS, NULL},
	{NULL},
};

static struct PyModuleDef moddef = {
	PyModuleDef_HEAD_INIT, "ioscope.kernel._libbpf", "CPython bindings over libbpf for ioscope", -1, mod_methods,
};

PyMODINIT_FUNC PyInit__libbpf(void)
{
	PyObject *mod;

	libbpf_set_print(print_fn);
	libbpf_set_strict_mode(LIBBPF_STRICT_ALL);
	if (PyType_Ready(&ObjectType) < 0 || PyType_Ready(&MapType) < 0 || PyType_Ready(&SlotRingsType) < 0 ||
	    PyType_Ready(&RingBufType) < 0)
		return NULL;
	mod = PyModule_Create(&moddef);
	if (!mod)
		return NULL;
	BPFError = PyErr_NewExceptionWithDoc("ioscope.kernel._libbpf.BPFError",
					     "a libbpf or bpf(2) failure; errno is set", PyExc_OSError, NULL);
	Py_INCREF(&ObjectType);
	PyModule_AddObject(mod, "Object", (PyObject *)&ObjectType);
	Py_INCREF(&MapType);
	PyModule_AddObject(mod, "Map", (PyObject *)&MapType);
	Py_INCREF(&SlotRingsType);
	PyModule_AddObject(mod, "SlotRings", (PyObject *)&SlotRingsType);
	Py_INCREF(&RingBufType);
	PyModule_AddObject(mod, "RingBuf", (PyObject *)&RingBufType);
	PyModule_AddObject(mod, "BPFError", BPFError);
	PyModule_AddIntConstant(mod, "BPF_ANY", BPF_ANY);
	PyModule_AddIntConstant(mod, "BPF_NOEXIST", BPF_NOEXIST);
	PyModule_AddIntConstant(mod, "BPF_EXIST", BPF_EXIST);
	PyModule_AddIntConstant(mod, "MAP_TYPE_HASH", BPF_MAP_TYPE_HASH);
	PyModule_AddIntConstant(mod, "MAP_TYPE_PERCPU_HASH", BPF_MAP_TYPE_PERCPU_HASH);
	PyModule_AddIntConstant(mod, "MAP_TYPE_ARRAY", BPF_MAP_TYPE_ARRAY);
	PyModule_AddIntConstant(mod, "MAP_TYPE_PERCPU_ARRAY", BPF_MAP_TYPE_PERCPU_ARRAY);
	return mod;
}
