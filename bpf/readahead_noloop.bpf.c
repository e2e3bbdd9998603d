// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* ioscope readahead for kernels without bpf_loop (5.10): readahead.bpf.c's programs, with bounded loops */
#define RA_NO_BPF_LOOP 1
#include "readahead.bpf.c"
