/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Every hook as two programs from one body: a tp_btf program and a raw_tp program. The loader
 * (lib/ioscope/kernel/loader.py) autoloads one of them per hook, from what the kernel's BTF and tracefs
 * offer. A body is an __always_inline function taking `const bool btf` (true in the tp_btf
 * program) that reads kernel memory with IOS_READ; its programs are made by IOS_TP, or by
 * IOS_BLOCK_TP for a block tracepoint. Nothing else differs between the two.
 */
#ifndef TWINS_BPF_H
#define TWINS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/*
 * IOS_READ(btf, p, a, b, ...): p->a->b..., the fields named as BPF_CORE_READ names them. With btf
 * true (a tp_btf program) plain loads: its arguments are BTF-typed pointers the verifier lets a
 * program dereference (faults handled), a load per pointer instead of a bpf_probe_read_kernel()
 * call. With btf false (raw_tp) BPF_CORE_READ. Both are CO-RE relocated. btf is a constant in
 * every program, so the other branch is compiled away.
 */
#define IOS_READ(btf, src, a, ...) \
	((btf) ? ___arrow((src), a, ##__VA_ARGS__) : BPF_CORE_READ((src), a, ##__VA_ARGS__))

/*
 * IOS_TP(hook, tp, body, args...): btf_<hook> in SEC("tp_btf/<tp>") and raw_<hook> in
 * SEC("raw_tp/<tp>"), taking the tracepoint's arguments args (a prefix of them will do), each
 * returning body: an expression over args, ctx and btf.
 */
#define IOS_TP(hook, tp, body, args...)                                     \
	SEC("tp_btf/" #tp)                                                   \
	int BPF_PROG(btf_##hook, args)                                       \
	{                                                                    \
		const bool btf __attribute__((unused)) = true;               \
		return body;                                                 \
	}                                                                    \
	SEC("raw_tp/" #tp)                                                   \
	int BPF_PROG(raw_##hook, args)                                       \
	{                                                                    \
		const bool btf __attribute__((unused)) = false;              \
		return body;                                                 \
	}

/*
 * IOS_BLOCK_TP(hook, tp, body, args...): IOS_TP, and the same pair for Linux 5.10's signature of
 * the block tracepoint, which passes the request_queue first: btf_<hook>__q and raw_<hook>__q.
 * A tp_btf program is typed by its tracepoint's arguments, and a raw_tp program may read no more
 * arguments than the tracepoint has, so each signature needs its own programs. The loader
 * autoloads the __q ones where the kernel's BTF says the first argument is a struct
 * request_queue *. Christoph Hellwig's block tracepoint cleanups in 5.11 took the queue out:
 *   a54895fa057c ("block: remove the request_queue to argument request based tracepoints")
 *   1c02fca620f7 ("block: remove the request_queue argument to the block_bio_remap tracepoint")
 *   eb6f7f7cd3af ("block: remove the request_queue argument to the block_split tracepoint")
 *   e8a676d61c07 ("block: simplify and extend the block_bio_merge tracepoint class": bio_queue,
 *                 getrq; backmerge and frontmerge passed (q, rq, bio), two IOS_TP in record.bpf.c)
 */
#define IOS_BLOCK_TP(hook, tp, body, args...)                               \
	IOS_TP(hook, tp, body, args)                                         \
	IOS_TP(hook##__q, tp, body, struct request_queue *ios_q_, args)

#endif /* TWINS_BPF_H */
