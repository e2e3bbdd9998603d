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

/* btt's activity ranges (its NAME.dat): [start, end] pairs of Q (or C) times, a new range where a time is
 * range_delta (btt's -d) or more past the last one's end, a time before that end ignored */
typedef struct {
	uint64_t *iv;
	size_t n, cap;
} ranges_t;

/* btt's per-second counts (NAME_iops_fp.dat, NAME_mbps_fp.dat) of completions and their blocks: the second
 * being counted (-1: none yet) */
typedef struct {
	int64_t base_sec;
	uint64_t ios, nblks;
} rstat_t;

/* btt's request-size histograms (NAME_qhist.dat, NAME_dhist.dat): buckets of 512-byte blocks, 1 to 1024
 * and the last for more */
#define N_HIST_BKTS 1025

/* btt's seeks per second (-m NAME: NAME_MAJ,MIN.dat) of one of a device's two seek streams (Q2Q, D2D): the
seeks since the bucket's first (times in ns; nseeks 0: none) */
typedef struct {
	uint64_t t_start, t_last, nseeks;
} sps_t;

/* btt's unplug histogram (-u NAME: NAME_MAJ,MIN.dat): buckets of 5 requests unplugged, 0-4 to 95-99, then
 * one for 100 or more */
#define N_UP_BKTS 21
#define UP_BKT_WIDTH 5

/* btt's periodic latencies (-L FREQ: MAJ,MIN_{q2d,q2c,d2c}_plat.dat) of one kind of a device: the latencies (in
 * seconds) since the period's first, its first and last time stamps (nl 0: none yet) */
typedef struct {
	uint64_t nl;
	double first_ts, last_ts, tl;
} plat_t;

/* btt's iostat counters of a device (-I: its struct stats), one set per interval and one for the whole trace;
 * index 1 of rqm, ios, sec: reads (btt's IOP_RW) */
typedef struct {
	uint64_t rqm[2], ios[2], sec[2], wait, svctm;
	double last_qu_change, last_dev_change, tot_qusz, idle_time;
	int cur_qusz, cur_dev;
} iostat_t;

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
	ranges_t qr, cr;
	rstat_t rs;
	int64_t aqd;               /* -Q: the requests issued and not completed, as btt's aqd file counts them */
	sps_t sps_q, sps_d;        /* -m: the seeks per second of the Q2Q and D2D streams */
	plat_t plat[3];            /* -L: the periods of the Q2D, D2C, Q2C latencies (by BL_Q2D, BL_D2C, BL_Q2C) */
	iostat_t ist, ist_all;     /* -I: this interval's counters and the whole trace's */
	uint64_t uphist[N_UP_BKTS]; /* -u: its unplugs (UNPLUG_IO) by requests unplugged, 5 a bucket */
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
	ranges_t qr, cr;
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

/* one row of btt's files written as it reads (in the order btt writes them): the per-I/O latency files
 * (-z q2d, -l d2c, -q q2c: time stamp and latency in ns from the time zero), its messages (NAME.msg: the
 * message's time, v its row in the chunk fed) and a second's line of the iops/mbps files (t the second,
 * v the completions, w their blocks; dev -1: the system's) */
typedef struct {
	int32_t kind;              /* BL_* */
	int32_t dev;               /* the device's index */
	uint64_t t, v, w;
} blat_t;
/* and, with btt's other files asked for (bttsim_t's aqd_on, seek_on, sps_on, bno_on): a change of a
 * device's active queue depth (-Q: v the depth before, w 1 for a D, 0 for a C), a seek (-s: v the signed
 * distance in sectors as btt's long long), a D's blocks (-B: v the start, w the end), a bucket of seeks
 * per second ended (-m: t its first seek's time, v the seeks, w the bits of the double btt prints);
 * BL_READ added to the kind of a seek or a D of a read (btt's files per direction) */
/* with btt's -p, at every C a track per Q it completes, in btt's order: its Q (t, v its sector, w its sectors),
 * its G, I, M (t, when it has one), its D (t, v the D's sector, w the D's sectors, when issued) and the C (t,
 * v the C's sector, w its sectors), then an end of the C (BL_PIO_END, after its last Q's track, none or more) */
enum { BL_Q2D, BL_D2C, BL_Q2C, BL_MSG, BL_RATE, BL_AQD, BL_SEEK_Q, BL_SEEK_D, BL_BNO, BL_SPS_Q, BL_SPS_D,
       BL_PIO_Q, BL_PIO_G, BL_PIO_I, BL_PIO_M, BL_PIO_D, BL_PIO_C, BL_PIO_END, BL_PIT_Q, BL_PIT_END, BL_PLAT };
/* with btt's -L, a period of a device's latencies ended: BL_PLAT + BL_Q2D, BL_D2C or BL_Q2C, t and v the bits of
 * the two doubles btt prints (the period's middle time stamp, its mean latency) */
/* with btt's -I, at the end of each interval (a record -S seconds or more after its start), per device btt set
 * up, in its order, five rows of its counters: BL_IOS_1 (t the record's time, v, w: rqm[0], rqm[1]), BL_IOS_2
 * (t the interval's start, ios[0], ios[1]), BL_IOS_3 (sec[0], sec[1]), BL_IOS_4 (wait, svctm in ns), BL_IOS_5
 * (the bits of the doubles tot_qusz and idle_time); then BL_IOS_END (t the record's time) */
enum { BL_IOS_1 = 23, BL_IOS_2, BL_IOS_3, BL_IOS_4, BL_IOS_5, BL_IOS_END };
/* with btt's -P, at every C: the time of each Q it completes (BL_PIT_Q, t), then BL_PIT_END (t the C's time, v
 * the D time of the last of those Qs that was issued, NONE when none was) */
#define BL_READ 0x100

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
	/* the rows of btt's files since the last take (lat_on: latency rows kept; files_on: messages and
	 * per-second lines); cur_ord: the row in the chunk of the event being read */
	int lat_on, files_on;
	int aqd_on, seek_on, sps_on, bno_on;   /* btt's -Q, -s, -m, -B */
	int pio_on, pit_on;                    /* btt's -p, -P */
	double plat_freq;                      /* btt's -L: the period in seconds (0 or less: off) */
	int iostat_on;                         /* btt's -I */
	uint64_t iostat_interval, io_last_start, io_last_stamp;   /* -S (ns); the interval's start, the last record */
	int64_t cur_ord;
	double range_delta;
	/* btt's -t/-T (time_bounded: both given or 0.0): records before t_start dropped, the first after t_end
	 * ends the reading (past_end: nothing after it is read, notes and messages included) */
	int time_bounded, past_end;
	double t_start, t_end;
	ranges_t qr, cr;
	rstat_t rs;
	uint64_t qhist[N_HIST_BKTS], dhist[N_HIST_BKTS];
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
