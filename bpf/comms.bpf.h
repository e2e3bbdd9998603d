/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Process names, and how they follow exec and renames: the one piece every BPF program of
 * ioscope shares for naming.
 *
 * A tool takes a process's name when it first sees it do I/O; a shell that forks and execs
 * `dd` would stay "sh" forever, and a worker that names itself with prctl(PR_SET_NAME) would
 * keep its old name. task:task_rename fires for every comm change (exec included), before
 * task->comm is overwritten, with the new name as an argument: each object's rename handler
 * (TASK_RENAME_PROGRAMS) updates the names it already holds. The work is done there, on a rare
 * event; the per-I/O path is unchanged.
 *
 * Tools keyed by process (tgid) name it by its thread-group leader, the name /proc/PID/comm and
 * ps show: the name is read from the leader at the first I/O (whichever thread does it), and
 * only the leader's renames rename the process (exec makes the exec'ing thread the leader before
 * it renames it); a thread naming itself ("worker-3") does not rename its process. A process
 * nobody holds a name for is left alone, so exec storms elsewhere on the host do not fill maps;
 * its name is read at its first I/O, so a rename before that is seen too.
 *
 * Define COMMS_MAP 0 before including to get only the helpers (a tool keeping names elsewhere:
 * readsize's per-process values, the recorder's notes).
 */
#ifndef COMMS_BPF_H
#define COMMS_BPF_H

#include "twins.bpf.h"
#include "maperr.bpf.h"

#ifndef COMMS_MAP
#define COMMS_MAP 1
#endif

/* The current process's name: its thread-group leader's comm. */
static __always_inline void process_comm(char comm[16])
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	if (BPF_CORE_READ_STR_INTO((char(*)[16])comm, task, group_leader, comm) < 0)
		bpf_get_current_comm(comm, 16);
}

/* The tgid a rename applies to, or 0 when it must not rename a process (a non-leader thread). */
static __always_inline __u32 renamed_tgid(struct task_struct *task)
{
	__u32 pid = BPF_CORE_READ(task, pid), tgid = BPF_CORE_READ(task, tgid);

	return pid == tgid ? tgid : 0;
}

/*
 * The task_rename programs (tp_btf and raw_tp; the loader picks one, and a kernel without the
 * tracepoint leaves names taken at the first I/O), calling the object's
 * handler(struct task_struct *task, const char *newcomm).
 */
#define TASK_RENAME_PROGRAMS(handler) \
	IOS_TP(task_rename, task_rename, handler(task, comm), struct task_struct *task, const char *comm)

#if COMMS_MAP
/* Command names of the processes that submit I/O, by tgid (LRU: old ones age out). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, char[16]);
} comms SEC(".maps");

/*
 * Name tgid (the current process) in the comms map. The buffer is zeroed first: the string
 * read stops at the NUL, and the map value is compared as 16 bytes (agg's WHERE comm == ...).
 */
static __always_inline void comms_note(__u32 tgid)
{
	char comm[16] = {};

	process_comm(comm);
	map_update(&comms, &tgid, comm, BPF_ANY);
}

/* task_rename: the new name replaces the one held for the process, if one is held. */
static __always_inline int comms_on_rename(struct task_struct *task, const char *newcomm)
{
	__u32 tgid = renamed_tgid(task);
	char comm[16] = {};

	if (!tgid || !bpf_map_lookup_elem(&comms, &tgid))
		return 0;
	bpf_probe_read_kernel_str(comm, sizeof(comm), newcomm);
	map_update(&comms, &tgid, comm, BPF_EXIST);
	return 0;
}

#define COMMS_RENAME_PROGRAMS TASK_RENAME_PROGRAMS(comms_on_rename)
#endif

#endif /* COMMS_BPF_H */
