/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Command names of the processes that submit I/O, by tgid (LRU: old ones age out). */
#ifndef COMMS_BPF_H
#define COMMS_BPF_H

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, char[16]);
} comms SEC(".maps");

#endif /* COMMS_BPF_H */
