/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * cgroup.bpf.h: the cgroup of a bio, for every object that keys, filters or records by cgroup (agg,
 * lat, top; docs/hacking.md). Ids are kernfs node ids (the cgroup directory's inode number) of the
 * hierarchy the io controller is on: v1 blkio or v2 (user space says which, and turns ids into paths:
 * lib/ioscope/engines/aggregate/names.py).
 *
 * -c CGROUP (every tool): I/O charged to that cgroup or to one under it, tested in the kernel from the
 * cgroup's own list of ancestors, so a cgroup made after the tool started (a new container of a pod)
 * is in the filter at once.
 */
#ifndef CGROUP_BPF_H
#define CGROUP_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

const volatile __u64 targ_cgroup = 0;       /* -c: its id (0: every cgroup) */
const volatile __u32 targ_cgroup_level = 0; /* its depth in the hierarchy (the root's is 0) */

/* Before 6.0 (commit 7f203bc89eb6, "cgroup: Replace cgroup->ancestor_ids[] with ->ancestors[]") a
 * cgroup kept its ancestors' ids, not pointers. */
struct cgroup___ids {
	int level;
	__u64 ancestor_ids[];
} __attribute__((preserve_access_index));

/* The cgroup the block layer charged a bio to (its blkg: bio_associate_blkg, the submitter's, also
 * when a kworker queues the bio, as blk-throttle's does once a throttled bio may go). Valid while the
 * bio lives: at its queue, and at its request's completion (block_rq_complete runs before bio_endio). */
static __always_inline struct cgroup *bio_blkg_cgroup(struct bio *bio)
{
	struct blkcg_gq *blkg;

	if (!bpf_core_field_exists(bio->bi_blkg))
		return NULL;
	blkg = BPF_CORE_READ(bio, bi_blkg);
	return blkg ? BPF_CORE_READ(blkg, blkcg, css.cgroup) : NULL;
}

static __always_inline __u64 cgroup_kn_id(struct cgroup *cg)
{
	return cg ? BPF_CORE_READ(cg, kn, id) : 0;
}

/* The current task's cgroup of the io controller (task->cgroups->subsys[io_cgrp_id]): the hierarchy of the
 * ids bio_blkg_cgroup() gives. */
static __always_inline struct cgroup *task_io_cgroup(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct css_set *cset = BPF_CORE_READ(task, cgroups);
	struct cgroup_subsys_state *css = NULL;
	__u32 io = bpf_core_enum_value(enum cgroup_subsys_id, io_cgrp_id);

	if (cset)
		bpf_core_read(&css, sizeof(css), &cset->subsys[io]);
	return css ? BPF_CORE_READ(css, cgroup) : NULL;
}

/*
 * The cgroup a bio is charged to, in the submitter's context (the queue event): its blkg's, and
 * without a blkg the queueing task's cgroup of the io controller (task->cgroups->subsys[io_cgrp_id]),
 * an id of the same hierarchy. Not for completion programs (the current task is anyone there).
 */
static __always_inline struct cgroup *bio_cgroup(struct bio *bio)
{
	struct cgroup *cg = bio_blkg_cgroup(bio);

	return cg ? cg : task_io_cgroup();
}

static __always_inline __u64 bio_cgroup_id(struct bio *bio)
{
	return cgroup_kn_id(bio_cgroup(bio));
}

/* -c: is cg the filter's cgroup or under it? True when no filter is set. */
static __always_inline bool cgroup_wanted(struct cgroup *cg)
{
	__u32 level = targ_cgroup_level;
	__u64 id = 0;

	if (!targ_cgroup)
		return true;
	if (!cg || level > 1023 || BPF_CORE_READ(cg, level) < (int)level)
		return false;
	if (bpf_core_field_exists(cg->ancestors)) {
		struct cgroup *a = NULL;

		bpf_core_read(&a, sizeof(a), &cg->ancestors[level]);
		id = cgroup_kn_id(a);
	} else {
		struct cgroup___ids *old = (void *)cg;

		bpf_core_read(&id, sizeof(id), &old->ancestor_ids[level]);
	}
	return id == targ_cgroup;
}

/*
 * At a completion: the cgroup of a bio of the ending request (id into *id when per_cgroup asks for
 * it), and whether -c keeps it. Reads nothing when neither is asked.
 */
static __always_inline bool bio_cgroup_pass(struct bio *bio, bool per_cgroup, __u64 *id)
{
	struct cgroup *cg;

	*id = 0;
	if (!per_cgroup && !targ_cgroup)
		return true;
	cg = bio ? bio_blkg_cgroup(bio) : NULL;
	if (per_cgroup)
		*id = cgroup_kn_id(cg);
	return cgroup_wanted(cg);
}

#endif /* CGROUP_BPF_H */
