/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Every failed map update and delete, counted by operation and error, in
 * every program of every object (issue: "count every failed map operation,
 * by error"). A hash map's update can fail for want of room (E2BIG, ENOMEM),
 * because the bucket's lock is held by a program this one interrupted on the
 * same CPU (EBUSY: htab_lock_bucket's re-entrancy check), or by a flag's rule
 * (EEXIST, ENOENT); a delete with ENOENT when the key was not there. Call
 * sites say which errors are expected there (a BPF_NOEXIST create racing
 * another CPU, a delete of a key that may be gone): those are not failures.
 * User space (loader.BPFObject.map_errors) reads map_errs into every tool's
 * lost_detail as map_update_<error> / map_delete_<error>: the losses each
 * call site counts already, explained by their kernel error.
 */
#ifndef MAPERR_BPF_H
#define MAPERR_BPF_H

#include <asm-generic/errno.h>
#include "ioscope.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOS_MAPERR_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} map_errs SEC(".maps");

static __always_inline __u32 maperr_class(int err)
{
	switch (err) {
	case -E2BIG: return IOS_MAPERR_E2BIG;
	case -ENOMEM: return IOS_MAPERR_ENOMEM;
	case -EBUSY: return IOS_MAPERR_EBUSY;
	case -ENOENT: return IOS_MAPERR_ENOENT;
	case -EEXIST: return IOS_MAPERR_EEXIST;
	default: return IOS_MAPERR_OTHER;
	}
}

static __always_inline void maperr_count(__u32 op, int err)
{
	__u32 idx = op * IOS_MAPERR_NR_CLASSES + maperr_class(err);
	__u64 *v = bpf_map_lookup_elem(&map_errs, &idx);

	if (v)
		*v += 1; /* per-CPU slot, and a program never runs nested in itself on a CPU */
	if (maperr_class(err) == IOS_MAPERR_OTHER) {
		idx = IOS_MAPERR_LAST_OTHER;
		v = bpf_map_lookup_elem(&map_errs, &idx);
		if (v)
			*v = -err;
	}
}

/*
 * The error of a map helper, as an int. Kernels before 6.4 declare the map operations (which the
 * verifier calls directly in place of the helper) as returning int, so the upper half of the
 * 64-bit result is not the sign: 6.1 returns -E2BIG as 0x00000000fffffff9. The low 32 bits are the
 * errno on every kernel.
 */
#define MAP_ERR(call) ((int)(call))

/* bpf_map_update_elem, counting a failure (expected: a BPF_NOEXIST create that finds the key, a
 * BPF_EXIST update that does not). */
static __always_inline int map_update(void *map, const void *key, const void *value, __u64 flags)
{
	int err = MAP_ERR(bpf_map_update_elem(map, key, value, flags));

	if (err && !(err == -EEXIST && flags == BPF_NOEXIST) && !(err == -ENOENT && flags == BPF_EXIST))
		maperr_count(IOS_MAPERR_UPDATE, err);
	return err;
}

/* bpf_map_delete_elem, counting a failure; absent_ok: the key may be gone already (ENOENT expected). */
static __always_inline int map_delete(void *map, const void *key, bool absent_ok)
{
	int err = MAP_ERR(bpf_map_delete_elem(map, key));

	if (err && !(err == -ENOENT && absent_ok))
		maperr_count(IOS_MAPERR_DELETE, err);
	return err;
}

#endif /* MAPERR_BPF_H */
