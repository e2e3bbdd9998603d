/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A file's name from the kernel's dentry cache, as struct agg_file (bpf/agg.h) holds it: the
 * path components from the file up to its file system's root, AGG_FILE_DEPTH of them at most.
 * User space joins them under the mount point with ioscope.engines.aggregate.names.file_path, the one
 * definition of a file key's path. Used by agg (its file key, file_note) and readahead (its
 * FILE column).
 */
#ifndef FNAME_BPF_H
#define FNAME_BPF_H

#include "agg.h"

/* Fill f with inode's name: its first alias dentry, then the parents. depth 0: no dentry (an
 * inode of a pseudo file system, or one whose dentries were all evicted). Constant offsets
 * only (the loop is unrolled), for the oldest verifier. */
static __always_inline void fname_fill(struct agg_file *f, struct inode *inode)
{
	struct hlist_node *first = BPF_CORE_READ(inode, i_dentry.first);
	struct dentry *d, *parent;

	f->ino = BPF_CORE_READ(inode, i_ino);
	f->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	f->depth = 0;
	if (!first)
		return;
	d = (struct dentry *)((void *)first - bpf_core_field_offset(struct dentry, d_u.d_alias));
#pragma unroll
	for (int i = 0; i < AGG_FILE_DEPTH; i++) {
		bpf_probe_read_kernel_str(f->comp[i], AGG_FILE_NAME, BPF_CORE_READ(d, d_name.name));
		f->depth = i + 1;
		parent = BPF_CORE_READ(d, d_parent);
		if (!parent || parent == d)
			break;
		d = parent;
	}
}

#endif /* FNAME_BPF_H */
