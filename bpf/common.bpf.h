/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What every collector object has: its per-CPU counters of losses and
 * explanations (stats, indexed by an enum of the object: IOS_STATS_SIZE
 * entries, IOS_NR_STATS unless the object defines its own before including),
 * the one lookup-or-create of a map value (lookup_or_init), the counted map
 * operations (maperr.bpf.h) and the in-kernel disk filter (-d, devfilter.bpf.h).
 */
#ifndef COMMON_BPF_H
#define COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
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

/*
 * The value of key in a hash map, created from *zero if absent; NULL when it could not be created
 * (the map is full: the caller counts the loss). Every lookup-or-create of a zeroed value goes
 * through here. The update's error needs no test of its own: a failed create leaves the key absent
 * and the lookup after it says so, while a create that finds the key (another CPU's, EEXIST) is not
 * a failure (map_update counts the others). A branch less also keeps the verifier's states few
 * where this runs before a loop (readahead's on_add). map_init is the second half, for a caller
 * that does something more when the key is new (readahead.bpf.c: file_stats).
 */
static __always_inline void *map_init(void *map, const void *key, const void *zero)
{
	map_update(map, key, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, key);
}

static __always_inline void *lookup_or_init(void *map, const void *key, const void *zero)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	return map_init(map, key, zero);
}

#include "devfilter.bpf.h"

#endif /* COMMON_BPF_H */
