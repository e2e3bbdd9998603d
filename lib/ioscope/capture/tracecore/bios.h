/*
 * ioscope's pairing engine (bios.c): which bio each block event belongs to, under one set of rules
 * (the kernel agg object's: bpf/agg.bpf.c over bpf/rqpath.bpf.h; engines/pairing/bios.py lists them).
 * Every offline reader of events pairs through it: agg -r and snoop through the Bios object (one record
 * per completed bio), report's ioscope view and its per-I/O table through Core (pairing.c), which reads
 * the stage times each event sets and compares the result with btt's own pairing (bttsim.c).
 *
 * In-flight bios are kept per (device key, start sector) in insertion order (two I/Os of one sector can
 * be in flight at once), in a chained hash table over a pool of bios.
 */
#ifndef IOSCOPE_BIOS_H
#define IOSCOPE_BIOS_H

#include <stddef.h>

#include "tracecore.h"

enum { BR_FIRST = 1, BR_FLUSH = 2, BR_UNPAIRED = 4 };

/* one completed bio (engines/pairing/bios.py: BIOREC) */
typedef struct {
	uint64_t c, q, d, sector;     /* q, d: NONE where absent */
	int64_t seek;                 /* -1: none */
	uint32_t dev, bytes, c_bytes, pid, tgid;   /* bytes: the bio's; c_bytes: its completion's */
	int32_t inflight;             /* -1: none */
	uint16_t cpu, category, error, flags;
	uint64_t cgroup;              /* the id of the cgroup its Q names (EV_CGROUP), 0: none */
} biorec_t;

/* one bio in flight */
typedef struct {
	uint64_t sector, q, d, g, cgroup;
	uint64_t i, m, sl;            /* its request's insert, its merge, its sleep for a request (NONE; sl 0) */
	uint64_t ord;                 /* the caller's ordinal of its Q event */
	int64_t seek;
	int32_t inflight, next, dev;  /* next: the next bio of the hash bucket (-1: none); dev: device index */
	int32_t proc;                 /* the caller's process index at its Q (-1: none) */
	uint32_t nbytes, pid, tgid, rq;   /* rq: requeues of its request */
	uint16_t cpu;
	uint8_t seq, split, write, noq, used, piece;   /* split: a remainder not yet queued again; piece: split */
	uint8_t dup;                  /* a later Q came at its start sector while it was in flight (Core's note) */
} bio_t;

typedef struct {
	uint32_t dev;                 /* the caller's key: a kernel dev_t (Bios) or a dense index (Core) */
	int machine;                  /* -1: no flush sequence; 0: write-back without FUA; 1: with FUA */
	int has_end;
	uint64_t last_end;
	int64_t inflight;
	uint64_t *fl;                 /* pending flush requests: (issue time, in flight before) pairs, FIFO */
	size_t nfl, capfl, hfl;
} biodev_t;

typedef struct {
	bio_t *pool;
	size_t npool, cappool;
	int32_t freelist;
	int32_t *heads;
	size_t nheads;                /* a power of two */
	size_t live;
	biodev_t *devs;
	size_t ndevs, capdevs, lastdev;
	biorec_t *out;                /* the records of the bios completed, appended */
	size_t nout, capout;
	bio_t *done;                  /* with keep_done: each record's bio as it was, parallel to out */
	size_t capdone;
	int keep_done;
	int stages;                   /* keep each bio's G, S, I, M times and requeues (Core reads them) */
	bio_t **chain;                /* what the last event touched: the bios it issued, or the one it found */
	size_t nchain, capchain;
	bio_t split_from;             /* the last split's bio before it was cut */
	uint64_t unpaired, last_ts;
	int oom;
} bioeng_t;

void be_init(bioeng_t *b);
void be_free(bioeng_t *b);
/* One event on the device with this key; proc and ord are kept with a bio its Q starts. Completed bios
 * are appended to out (and done); chain/nchain hold what it touched: for a D the bios it issued first,
 * for G, S, I, M and R the bio it applies to, for X the two pieces (split_from: the bio before). */
void be_event(bioeng_t *b, const event_t *E, uint32_t key, int32_t proc, uint64_t ord);
/* the bio queued at sector on the device with this key (the oldest; NULL: none) */
bio_t *be_find(bioeng_t *b, uint32_t key, uint64_t sector);

#endif
