/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What every collector object has: its per-CPU counters of losses and
 * explanations (stats, indexed by an enum of the object: IOS_STATS_SIZE
 * entries, IOS_NR_STATS unless the object defines its own before including),
 * and the in-kernel disk filter (-d) that user space fills before attaching.
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

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		__sync_fetch_and_add(v, 1);
}

/* -d DISK: kernel dev_t values wanted (set targ_filter_dev and fill the map before attach) */
const volatile bool targ_filter_dev = false;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} dev_filter SEC(".maps");

static __always_inline bool dev_wanted(__u32 dev)
{
	if (!targ_filter_dev)
		return true;
	return bpf_map_lookup_elem(&dev_filter, &dev) != NULL;
}

#endif /* COMMON_BPF_H */
