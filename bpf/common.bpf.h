/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What every collector object has: its per-CPU counters of losses and
 * explanations (stats, indexed by an enum of the object: IOS_STATS_SIZE
 * entries, IOS_NR_STATS unless the object defines its own before including),
 * and the in-kernel disk filter (-d, devfilter.bpf.h).
 * Include once per .bpf.c, after vmlinux.h and the libbpf headers.
 */
#ifndef COMMON_BPF_H
#define COMMON_BPF_H

#include "ioscope.h"

#ifndef IOS_STATS_SIZE
#define IOS_STATS_SIZE IOS_NR_STATS
#endif

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOS_STATS_SIZE);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

#include "maperr.bpf.h"

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		__sync_fetch_and_add(v, 1);
}

/* The value of key in a hash map, created from *zero if absent (NULL: the map is full). */
static __always_inline void *lookup_or_init(void *map, void *key, void *zero)
{
	void *v = bpf_map_lookup_elem(map, key);
	int err;

	if (v)
		return v;
	err = map_update(map, key, zero, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST: another CPU won the race */)
		return NULL;
	return bpf_map_lookup_elem(map, key);
}

#include "devfilter.bpf.h"

#endif /* COMMON_BPF_H */
