/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The kernel half of the one histogram convention (see ioscope.h). */
#ifndef HIST_BPF_H
#define HIST_BPF_H

#include "ioscope.h"

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8)  { v >>= 8;  r += 8; }
	if (v >> 4)  { v >>= 4;  r += 4; }
	if (v >> 2)  { v >>= 2;  r += 2; }
	if (v >> 1)  { r += 1; }
	return r;
}

/* Bucket index of v; lib/ioscope/base/hist.py:bucket_index is the same function. 64 bits wide: a
 * 32-bit index is zero-extended into a second register after its bound check, where 6.1's
 * verifier no longer knows the bound ("R1 unbounded memory access"). */
static __always_inline __u64 hist_bucket(__u64 v)
{
	__u32 k;

	if (v < IOS_HIST_SUB)
		return v;
	k = log2_u64(v);
	if (k >= IOS_HIST_MAX_LOG2)
		return IOS_HIST_NBUCKETS - 1;
	return (__u64)(k - IOS_HIST_SUB_BITS + 1) * IOS_HIST_SUB + ((v >> (k - IOS_HIST_SUB_BITS)) & (IOS_HIST_SUB - 1));
}

/* Add one value. Works on per-CPU and shared maps alike (atomic adds). */
static __always_inline void hist_add(struct hist *h, __u64 v)
{
	__u64 idx = hist_bucket(v);

	if (idx >= IOS_HIST_NBUCKETS)
		idx = IOS_HIST_NBUCKETS - 1;
	barrier_var(idx); /* the clamped value is the one used */
	__sync_fetch_and_add(&h->slots[idx], 1);
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->sum, v);
	if (v > h->max)
		h->max = v;
	if (~v > h->min_inv)
		h->min_inv = ~v;
}

/*
 * Add one value to a histogram only this CPU writes: a per-CPU map value
 * updated from a single program, which the kernel never runs nested with
 * itself on one CPU (tp_btf/raw_tp recursion protection). Plain adds: no
 * locked instructions.
 */
static __always_inline void hist_put(struct hist *h, __u64 idx, __u64 v) /* into bucket idx (clamped) */
{
	if (idx >= IOS_HIST_NBUCKETS)
		idx = IOS_HIST_NBUCKETS - 1;
	barrier_var(idx);
	h->slots[idx] += 1;
	h->count += 1;
	h->sum += v;
	if (v > h->max)
		h->max = v;
	if (~v > h->min_inv)
		h->min_inv = ~v;
}

static __always_inline void hist_add_local(struct hist *h, __u64 v)
{
	hist_put(h, hist_bucket(v), v);
}

#endif /* HIST_BPF_H */
