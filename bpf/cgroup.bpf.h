/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * cgroup.bpf.h: the cgroup of a bio, for every object that keys, filters or records by cgroup (agg,
 * record, top, lat, snoop, readsize, fair; docs/hacking.md). Ids are kernfs node ids (the cgroup
 * directory's inode number) of the hierarchy the io controller is on: v1 blkio or v2 (user space says
 * which, and turns ids into paths: lib/ioscope/engines/context/).
 */
#ifndef CGROUP_BPF_H
#define CGROUP_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/*
 * The cgroup the block layer charges a bio to, in the hierarchy the io controller is on (v1 blkio or
 * v2): its blkg's (bio_associate_blkg: the submitter's, also when a kworker queues the bio, as
 * blk-throttle's does once a throttled bio may go). Without a blkg, the queueing task's cgroup of the
 * io controller (task->cgroups->subsys[io_cgrp_id]): an id of the same hierarchy. The id is the
 * cgroup directory's inode number (kernfs_node.id, a u64 since 5.5).
 */
static __always_inline __u64 bio_cgroup_id(struct bio *bio)
{
	struct cgroup *cg = NULL;

	if (bpf_core_field_exists(bio->bi_blkg)) {
		struct blkcg_gq *blkg = BPF_CORE_READ(bio, bi_blkg);

		if (blkg)
			cg = BPF_CORE_READ(blkg, blkcg, css.cgroup);
	}
	if (!cg) {
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();
		struct css_set *cset = BPF_CORE_READ(task, cgroups);
		struct cgroup_subsys_state *css = NULL;
		__u32 io = bpf_core_enum_value(enum cgroup_subsys_id, io_cgrp_id);

		if (cset)
			bpf_core_read(&css, sizeof(css), &cset->subsys[io]);
		if (css)
			cg = BPF_CORE_READ(css, cgroup);
	}
	return cg ? BPF_CORE_READ(cg, kn, id) : 0;
}

#endif /* CGROUP_BPF_H */
