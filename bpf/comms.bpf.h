/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Command names of the processes that submit I/O, by tgid (LRU: old ones age out), and how
 * they follow renames.
 *
 * A tool takes a process's name when it first sees it do I/O; a shell that forks and execs
 * `dd` would stay "sh" forever, and a worker that names itself with prctl(PR_SET_NAME) would
 * keep its old name. task:task_rename fires for every comm change (exec included), before
 * task->comm is overwritten, with the new name as an argument: the handler here updates the
 * name a tool already holds for that process. Only the thread-group leader names the process
 * (exec makes the exec'ing thread the leader first); a thread renaming itself ("worker-3")
 * does not rename its process. A process nobody holds a name for is left alone, so exec
 * storms elsewhere on the host do not fill the map.
 *
 * Include after vmlinux.h and the libbpf headers. Define COMMS_MAP 0 to get only the
 * helpers (a tool keeping names elsewhere).
 */
#ifndef COMMS_BPF_H
#define COMMS_BPF_H

#ifndef COMMS_MAP
#define COMMS_MAP 1
#endif

#if COMMS_MAP
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, char[16]);
} comms SEC(".maps");
#endif

/* The tgid a rename applies to, or 0 when it must not rename a process (a non-leader thread). */
static __always_inline __u32 renamed_tgid(struct task_struct *task)
{
	__u32 pid = BPF_CORE_READ(task, pid), tgid = BPF_CORE_READ(task, tgid);

	return pid == tgid ? tgid : 0;
}

#if COMMS_MAP
/* task_rename: the new name replaces the one held for the process, if one is held. */
static __always_inline int comms_on_rename(struct task_struct *task, const char *newcomm)
{
	__u32 tgid = renamed_tgid(task);
	char comm[16] = {};

	if (!tgid || !bpf_map_lookup_elem(&comms, &tgid))
		return 0;
	bpf_probe_read_kernel_str(comm, sizeof(comm), newcomm);
	bpf_map_update_elem(&comms, &tgid, comm, BPF_EXIST);
	return 0;
}

#define COMMS_RENAME_PROGRAMS                                                          \
	SEC("tp_btf/task_rename")                                                      \
	int BPF_PROG(btf_task_rename, struct task_struct *task, const char *comm)      \
	{                                                                              \
		return comms_on_rename(task, comm);                                    \
	}                                                                              \
	SEC("raw_tp/task_rename")                                                      \
	int BPF_PROG(raw_task_rename, struct task_struct *task, const char *comm)      \
	{                                                                              \
		return comms_on_rename(task, comm);                                    \
	}
#endif

#endif /* COMMS_BPF_H */
