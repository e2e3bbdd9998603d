/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A kernel pointer as a plain number, the key of what it points to in a map (a bio, a request): the
 * slot table (inflight.bpf.h), agg's and lat's request maps, fileslower's bios of a call.
 */
#ifndef PTRVAL_BPF_H
#define PTRVAL_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} scratch SEC(".maps");

/* A pointer's value as a plain number, the key of what it points to. tp_btf (and fentry) arguments
 * are typed pointers, on which the verifier forbids arithmetic such as hashing: stored to and read
 * back from map memory, such a pointer is a number. A raw_tp argument is one already. */
static __always_inline __u64 ptr_value(const void *p, const bool btf)
{
	__u32 zero = 0;
	__u64 *s;

	if (!btf)
		return (__u64)p;
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	*(volatile __u64 *)s = (__u64)p;
	return *(volatile __u64 *)s;
}

#endif /* PTRVAL_BPF_H */
