/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The in-kernel disk filter (-d DISK), one for every object: a hash of the
 * kernel dev_t values wanted, filled by user space (loader.filter_disks)
 * after load and before attach; targ_filter_dev off means every disk. Up to
 * IOS_MAX_FILTER_DISKS disks, the same limit in every tool (loader.MAX_FILTER_DISKS).
 * Included by common.bpf.h, and by record.bpf.c, which keeps its own counters.
 */
#ifndef DEVFILTER_BPF_H
#define DEVFILTER_BPF_H

#define IOS_MAX_FILTER_DISKS 256

const volatile bool targ_filter_dev = false;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IOS_MAX_FILTER_DISKS);
	__type(key, __u32);
	__type(value, __u8);
} dev_filter SEC(".maps");

static __always_inline bool dev_wanted(__u32 dev)
{
	if (!targ_filter_dev)
		return true;
	return bpf_map_lookup_elem(&dev_filter, &dev) != NULL;
}

#endif /* DEVFILTER_BPF_H */
