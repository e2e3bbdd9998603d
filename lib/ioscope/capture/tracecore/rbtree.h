/*
 * btt's red-black trees, rebuilt node for node because what btt prints depends on their shape.
 *
 * The tree of Qs (qtree_t): btt keeps the Qs in flight in a red-black tree per disk keyed by start
 * sector (Linux's classic rbtree: textbook insertion and deletion, the successor taking a deleted
 * node's place) and looks events up by descending it: a G, I, M or S goes to the first Q met whose
 * range holds its sector; a D or C to the Qs inside its range that the descent reaches (it turns back
 * at a Q that covers the range's end on that side). When Qs overlap (a split bio btt never completes,
 * and the later I/Os inside its range) which one is met depends on the tree's shape. A Q at the start
 * sector of one in the tree takes that node's place (btt 2.09 of Debian's blktrace 1.2.0 completes
 * the newer: tests/test_report.py). All disks' nodes live in one array; each disk has its root.
 *
 * The trees of seek distances (stree_t): a red-black tree of distinct |distance| with a count each,
 * built by the classic insertion algorithm. btt's MEDIAN and MODE columns depend on the tree's shape:
 * its median is the first node, in pre-order, whose own count reaches half the seeks; its modes are
 * the most frequent distances in post-order. The true median is reported as well.
 */
#ifndef IOSCOPE_RBTREE_H
#define IOSCOPE_RBTREE_H

#include "tracecore.h"

/* one Q in flight, as btt's struct io holds it */
typedef struct {
	uint64_t t, s, e;          /* Q time, start and end sector */
	uint64_t g, i, m, d;       /* btt's g_time, i_time, m_time, d_time (NONE: not seen) */
	uint64_t sl;               /* s_time (0: no sleep) */
	uint64_t ds, dn;           /* btt's d_sec, d_nsec: the sector and sectors of the D that issued it (-p) */
	int32_t pip;               /* btt's process of the Q (-1: none) */
	uint32_t split;            /* btt ignores X: here it is only noted, for what btt counts differently */
	int32_t l, r, p;
	int32_t red;
} qnode_t;

typedef struct {
	qnode_t *n;                /* nodes of every disk's tree; free ones are chained through r */
	size_t nn, cap;
	int32_t free;
	int32_t *hits;             /* qt_walk's result */
	size_t nhits, caphits;
} qtree_t;

void qt_init(qtree_t *q);
void qt_free(qtree_t *q);
/* Insert a Q [s, e) into the tree at *root: its node (fields t.. to fill), or -1 when out of memory.
 * *replaced: a Q at that start sector was in the tree, and this node is now the new one's. */
int32_t qt_insert(qtree_t *q, int32_t *root, uint64_t s, uint64_t e, int *replaced);
void qt_erase(qtree_t *q, int32_t *root, int32_t z);
/* btt's lookup of one sector: the first Q met on the way down whose range holds it, or -1 */
int32_t qt_find(const qtree_t *q, int32_t root, uint64_t sec);
/* btt's range walk: the Qs inside [s, e) it reaches, into q->hits (nhits); -1 when out of memory */
int qt_walk(qtree_t *q, int32_t root, uint64_t s, uint64_t e);
/* the smallest d of the Qs in the tree (NONE: none issued) */
uint64_t qt_min_issued(const qtree_t *q, int32_t root);

/* 20 bytes a node (a random workload has one node per seek): no parent index, the insertion keeps
 * the path from the root instead; the colour shares a word with the right index */
typedef struct __attribute__((packed, aligned(4))) {
	uint64_t key;
	uint32_t cnt;
	int32_t left;
	int32_t right : 31;
	uint32_t red : 1;
} snode_t;

typedef struct {
	snode_t *n;
	int32_t nn, cap, root;
	uint64_t last_start, last_end;
	uint64_t nseeks;
	double total;
} stree_t;

void st_init(stree_t *t);
/* the seek distance from the last I/O to [s, e), as btt measures it (counted; inserted by st_insert), in
 * unsigned arithmetic: btt's long long sectors overflow past 2^63, these do not */
uint64_t st_dist(stree_t *t, uint64_t s, uint64_t e);
int st_insert(stree_t *t, uint64_t key);
/* {"n", "total", "btt_median", "median", "modes", "nmodes", "most", "distinct"} */
PyObject *st_export(const stree_t *t);

#endif
