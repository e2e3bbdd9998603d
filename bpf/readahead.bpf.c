// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* ioscope readahead, for kernels with bpf_loop (5.17 on): the programs are in readahead.bpf.h */
#include "readahead.bpf.h"
