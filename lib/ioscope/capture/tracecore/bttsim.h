/*
 * btt's own rules (bttsim.c), to the byte: its devices, processes, pairing and every number btt -A
 * prints, from the events in the order btt reads them.
 */
#ifndef IOSCOPE_BTTSIM_H
#define IOSCOPE_BTTSIM_H

#include <pthread.h>

#include "rbtree.h"

/* btt's struct avg_info: n, min, max and total in ns */
typedef struct {
	uint64_t n, min, max, total;
} avg_t;

/* the averages btt keeps per device, per process and for all (its avgs_info) */
enum {
	BP_Q2Q, BP_Q2A, BP_Q2G, BP_S2G, BP_G2I, BP_Q2M, BP_I2D, BP_M2D, BP_D2C, BP_Q2C,
	BP_Q2Q_DM, BP_Q2A_DM, BP_Q2C_DM, BP_BLKS, BP_N
};

/* btt's I/O active periods ([D, C] of every completed I/O, merged where they touch): the open ones in a
 * sorted array, those that can no longer grow folded into counters */
typedef struct {
	uint64_t *iv;              /* [start, end] pairs, sorted, disjoint */
	size_t n, cap;
	uint64_t done_n, done_live, done_end;
} live_t;

/* one device as btt's struct d_info holds it */
typedef struct {
	int alloc, culling, dm;
	uint64_t start_t, end_t;   /* first event seen, last event past the culling (times; BIT_TIME'd on output) */
	int32_t root;              /* its tree of Qs */
	uint64_t last_q, n_qs, n_ds, n_act_q, t_act_q;
	avg_t avg[BP_N];
	int plugged;
	double last_plug, plugged_time;
	uint64_t nplugs, nplugs_t, nios_up, nios_upt;
	uint64_t q2d[10];
	stree_t seek_q, seek_d;
	live_t live;
	/* what btt counts that ioscope's view counts otherwise, by reason */
	uint64_t x_events, x_bios;     /* split pieces (X) and bios split: btt ignores X */
	uint64_t x_never;              /* split bios btt never completes (no D or C covers them) */
	uint64_t q_replaced;           /* Qs whose node a later Q at the same start sector took */
	uint64_t a_elsewhere;          /* remaps (A) counted here that went to another device */
} bdev_t;

/* one process as btt's struct p_info holds it; name >= 0: a name id given with set_names order,
 * < 0: btt's "pid%09u" for pid -name - 1 */
typedef struct {
	int64_t name;
	uint64_t last_q;
	avg_t avg[BP_N];
} bproc_t;

/* one record as btt reads it */
typedef struct {
	uint64_t t;                /* time from the trace's time zero */
	uint64_t sector, aux;      /* aux: unplug count, remap's sector_from */
	uint32_t bytes, pid, category;
	int32_t dev, auxdev;       /* dense device indexes: the record's own device, a remap's device_from */
	int32_t target;            /* a remap's device_to (where ioscope counts it; -1: unknown) */
	int32_t action;            /* action code; BS_NOTE a process note, BS_MESSAGE a message */
	int32_t name;              /* a process note's name id; for a record, its pid's name if it has none yet (-1) */
} bs_ev_t;
#define BS_NOTE (-1)
#define BS_MESSAGE (-2)

/* one row of btt's per-I/O latency files (-z q2d, -l d2c, -q q2c), in the order btt writes them */
typedef struct {
	int32_t kind;              /* BL_Q2D, BL_D2C, BL_Q2C */
	int32_t dev;               /* the device's index */
	uint64_t t, v;             /* btt's time stamp of the row and the latency (ns, from the time zero) */
} blat_t;
enum { BL_Q2D, BL_D2C, BL_Q2C };

typedef struct {
	uint64_t dist;
	int32_t tree;              /* device index * 2 + (0: Q2Q, 1: D2D) */
} seekjob_t;

typedef struct {
	bdev_t *devs;
	size_t ndevs;
	int32_t *order;            /* device indexes in btt's allocation order */
	size_t norder;
	bproc_t *procs;
	size_t nprocs, capprocs;
	uint32_t *hkey;            /* pid -> process (open addressing; value -1: empty) */
	int32_t *hval;
	size_t hcap, hn;
	int32_t *by_name;          /* name id -> process (-1: none) */
	size_t nby_name;
	uint64_t last_q;
	avg_t all[BP_N];
	live_t live_all;
	qtree_t qt;
	int oom, no_seeks;
	/* the rows of btt's latency files since the last take (lat_on: kept) */
	int lat_on;
	blat_t *lat;
	size_t nlat, caplat;
	/* what the last event paired, for Core's comparison: a G's Q node (or -1); a C's completed Qs
	 * as (Q time, start sector) pairs */
	int32_t g_node;
	uint64_t *done_ts;
	size_t ndone, capdone;
	/* the seek trees are built by two worker threads (Q2Q, D2D) while Python works on a chunk */
	seekjob_t *jobs, *work;
	size_t njobs, capjobs, nwork, capwork;
	pthread_t worker[2];
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int started, busy, quit, worker_oom;
	uint64_t generation, done[2];
} bttsim_t;

void bs_init(bttsim_t *s);
void bs_free(bttsim_t *s);
int bs_ensure_dev(bttsim_t *s, size_t idx);
/* one record; -1 when out of memory */
int bs_event(bttsim_t *s, const bs_ev_t *e);
/* before a batch of bs_event calls (waits for the seek workers) and after it (hands them the distances) */
int bs_begin(bttsim_t *s);
int bs_end(bttsim_t *s);
/* fold the active periods that can no longer grow (now: the last event's time) */
void bs_fold_live(bttsim_t *s, uint64_t now);
/* everything btt prints, as a dict (bttsim.c) */
PyObject *bs_result(bttsim_t *s);

#endif
