/*
 * btt's red-black trees (rbtree.h): the tree of Qs in flight per disk and the trees of seek distances,
 * with the same insertions, deletions and traversals as btt, so that they take the same shapes.
 */
#include "rbtree.h"

_Static_assert(sizeof(snode_t) == 20, "seek tree node size");
#define ST_MAX_NODES ((1 << 30) - 1)   /* what right:31 indexes */
#define ST_MAX_DEPTH 96                /* a red-black tree of < 2^30 nodes is < 60 deep */

/* ------------------------------------------------------------------ the tree of Qs */

static int32_t qt_alloc(qtree_t *c)
{
	if (c->free >= 0) {
		int32_t x = c->free;
		c->free = c->n[x].r;
		return x;
	}
	if (c->nn == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 256;
		if (cap > INT32_MAX)
			return -1;
		qnode_t *n = realloc(c->n, cap * sizeof(*n));
		if (!n)
			return -1;
		c->n = n;
		c->cap = cap;
	}
	return (int32_t)c->nn++;
}

static void qt_rotate(qtree_t *c, int32_t *root, int32_t x, int left)
{
	qnode_t *n = c->n;
	int32_t y = left ? n[x].r : n[x].l;
	if (left) {
		n[x].r = n[y].l;
		if (n[y].l >= 0) n[n[y].l].p = x;
		n[y].l = x;
	} else {
		n[x].l = n[y].r;
		if (n[y].r >= 0) n[n[y].r].p = x;
		n[y].r = x;
	}
	int32_t px = n[x].p;
	n[y].p = px;
	if (px < 0) *root = y;
	else if (n[px].l == x) n[px].l = y;
	else n[px].r = y;
	n[x].p = y;
}

int32_t qt_insert(qtree_t *c, int32_t *root, uint64_t s, uint64_t e, int *replaced)
{
	qnode_t *n = c->n;
	int32_t p = -1, x = *root;
	int left = 0;
	*replaced = 0;
	while (x >= 0) {
		p = x;
		if (s < n[x].s) { x = n[x].l; left = 1; }
		else if (s > n[x].s) { x = n[x].r; left = 0; }
		else {
			n[x].e = e;
			*replaced = 1;
			return x;
		}
	}
	int32_t z = qt_alloc(c);
	if (z < 0)
		return -1;
	n = c->n;
	memset(&n[z], 0, sizeof(n[z]));
	n[z].s = s;
	n[z].e = e;
	n[z].l = n[z].r = -1;
	n[z].p = p;
	n[z].red = 1;
	if (p < 0) *root = z;
	else if (left) n[p].l = z;
	else n[p].r = z;
	int32_t ret = z;
	while (n[z].p >= 0 && n[n[z].p].red) {
		int32_t zp = n[z].p, g = n[zp].p;
		int pl = n[g].l == zp;
		int32_t u = pl ? n[g].r : n[g].l;
		if (u >= 0 && n[u].red) {
			n[zp].red = 0; n[u].red = 0; n[g].red = 1;
			z = g;
			continue;
		}
		if (z == (pl ? n[zp].r : n[zp].l)) {
			z = zp;
			qt_rotate(c, root, z, pl);
			zp = n[z].p;
		}
		n[zp].red = 0; n[g].red = 1;
		qt_rotate(c, root, g, !pl);
	}
	n[*root].red = 0;
	return ret;
}

void qt_erase(qtree_t *c, int32_t *root, int32_t z)
{
	qnode_t *n = c->n;
	int32_t child, parent, red;
	if (n[z].l < 0 || n[z].r < 0) {
		child = n[z].l < 0 ? n[z].r : n[z].l;
		parent = n[z].p;
		red = n[z].red;
		if (child >= 0) n[child].p = parent;
		if (parent < 0) *root = child;
		else if (n[parent].l == z) n[parent].l = child;
		else n[parent].r = child;
	} else {
		int32_t y = n[z].r;  /* the successor takes z's place and colour */
		while (n[y].l >= 0) y = n[y].l;
		child = n[y].r;
		parent = n[y].p;
		red = n[y].red;
		if (child >= 0) n[child].p = parent;
		if (parent == z) {
			n[parent].r = child;
			parent = y;
		} else {
			n[parent].l = child;
		}
		n[y].p = n[z].p; n[y].red = n[z].red; n[y].l = n[z].l; n[y].r = n[z].r;
		if (n[z].p < 0) *root = y;
		else if (n[n[z].p].l == z) n[n[z].p].l = y;
		else n[n[z].p].r = y;
		n[n[z].l].p = y;
		if (n[z].r >= 0) n[n[z].r].p = y;
	}
	if (!red) {
		int32_t x = child;
		while ((x < 0 || !n[x].red) && x != *root) {
			int xl = n[parent].l == x;
			int32_t w = xl ? n[parent].r : n[parent].l;
			if (n[w].red) {
				n[w].red = 0; n[parent].red = 1;
				qt_rotate(c, root, parent, xl);
				w = xl ? n[parent].r : n[parent].l;
			}
			int32_t wn = xl ? n[w].l : n[w].r, wf = xl ? n[w].r : n[w].l;
			if ((wn < 0 || !n[wn].red) && (wf < 0 || !n[wf].red)) {
				n[w].red = 1;
				x = parent;
				parent = n[x].p;
			} else {
				if (wf < 0 || !n[wf].red) {
					n[wn].red = 0; n[w].red = 1;
					qt_rotate(c, root, w, !xl);
					w = xl ? n[parent].r : n[parent].l;
				}
				n[w].red = n[parent].red; n[parent].red = 0;
				wf = xl ? n[w].r : n[w].l;
				if (wf >= 0) n[wf].red = 0;
				qt_rotate(c, root, parent, xl);
				x = *root;
				break;
			}
		}
		if (x >= 0) n[x].red = 0;
	}
	n[z].r = c->free;
	c->free = z;
}

int32_t qt_find(const qtree_t *c, int32_t root, uint64_t sec)
{
	int32_t x = root;
	while (x >= 0) {
		if (sec < c->n[x].s) x = c->n[x].l;
		else if (sec >= c->n[x].e) x = c->n[x].r;
		else return x;
	}
	return -1;
}

static int walk(qtree_t *c, int32_t x, uint64_t s, uint64_t e)
{
	while (x >= 0) {
		qnode_t *n = &c->n[x];
		if (s <= n->s && n->e <= e) {
			if (tc_room(&c->hits, &c->caphits, c->nhits, sizeof(*c->hits), 64) < 0)
				return -1;
			c->hits[c->nhits++] = x;
		}
		int goleft = s < n->s, goright = n->e < e;
		if (goleft && goright) {
			if (walk(c, n->l, s, e) < 0)
				return -1;
			x = c->n[x].r;
		} else if (goleft) {
			x = n->l;
		} else if (goright) {
			x = n->r;
		} else {
			break;
		}
	}
	return 0;
}

int qt_walk(qtree_t *c, int32_t root, uint64_t s, uint64_t e)
{
	c->nhits = 0;
	return walk(c, root, s, e);
}

static uint64_t min_d(const qtree_t *c, int32_t x)
{
	uint64_t best = NONE;
	while (x >= 0) {
		if (c->n[x].d < best)
			best = c->n[x].d;
		uint64_t l = min_d(c, c->n[x].l);
		if (l < best)
			best = l;
		x = c->n[x].r;
	}
	return best;
}

uint64_t qt_min_issued(const qtree_t *c, int32_t root)
{
	return min_d(c, root);
}

void qt_init(qtree_t *c)
{
	memset(c, 0, sizeof(*c));
	c->free = -1;
}

void qt_free(qtree_t *c)
{
	free(c->n);
	free(c->hits);
	qt_init(c);
}

/* ------------------------------------------------------------------ the trees of seek distances */

static void st_rotate_left(stree_t *t, int32_t x, int32_t px)
{
	snode_t *n = t->n;
	int32_t y = n[x].right;
	n[x].right = n[y].left;
	n[y].left = x;
	if (px < 0)
		t->root = y;
	else if (n[px].left == x)
		n[px].left = y;
	else
		n[px].right = y;
}

static void st_rotate_right(stree_t *t, int32_t x, int32_t px)
{
	snode_t *n = t->n;
	int32_t y = n[x].left;
	n[x].left = n[y].right;
	n[y].right = x;
	if (px < 0)
		t->root = y;
	else if (n[px].right == x)
		n[px].right = y;
	else
		n[px].left = y;
}

/* The classic insertion and fix-up (same recolourings and rotations, so the same tree shape) */
int st_insert(stree_t *t, uint64_t key)
{
	int32_t path[ST_MAX_DEPTH];
	int d = -1;
	int32_t cur = t->root;
	int go_left = 0;
	while (cur >= 0) {
		if (d + 2 >= ST_MAX_DEPTH)
			return -1;
		path[++d] = cur;
		if (key < t->n[cur].key) {
			cur = t->n[cur].left;
			go_left = 1;
		} else if (key > t->n[cur].key) {
			cur = t->n[cur].right;
			go_left = 0;
		} else {
			t->n[cur].cnt++;
			return 0;
		}
	}
	if (t->nn == t->cap) {
		if (t->cap >= ST_MAX_NODES)
			return -1;
		int32_t cap = t->cap ? (t->cap > ST_MAX_NODES / 2 ? ST_MAX_NODES : t->cap * 2) : 256;
		snode_t *nn = realloc(t->n, (size_t)cap * sizeof(*nn));
		if (!nn)
			return -1;
		t->n = nn;
		t->cap = cap;
	}
	int32_t z = t->nn++;
	snode_t *n = t->n;
	n[z].key = key;
	n[z].cnt = 1;
	n[z].left = n[z].right = -1;
	n[z].red = 1;
	if (d < 0)
		t->root = z;
	else if (go_left)
		n[path[d]].left = z;
	else
		n[path[d]].right = z;
	path[++d] = z;
	/* fix-up: path[d] is z, path[d - 1] its parent; a red parent is never the root, so d >= 2 */
	while (d >= 2 && n[path[d - 1]].red) {
		int32_t p = path[d - 1], g = path[d - 2], gg = d >= 3 ? path[d - 3] : -1;
		z = path[d];
		if (p == n[g].left) {
			int32_t u = n[g].right;
			if (u >= 0 && n[u].red) {
				n[p].red = 0;
				n[u].red = 0;
				n[g].red = 1;
				d -= 2;
				continue;
			}
			if (z == n[p].right) {
				st_rotate_left(t, p, g);
				p = z;
			}
			n[p].red = 0;
			n[g].red = 1;
			st_rotate_right(t, g, gg);
		} else {
			int32_t u = n[g].left;
			if (u >= 0 && n[u].red) {
				n[p].red = 0;
				n[u].red = 0;
				n[g].red = 1;
				d -= 2;
				continue;
			}
			if (z == n[p].left) {
				st_rotate_right(t, p, g);
				p = z;
			}
			n[p].red = 0;
			n[g].red = 1;
			st_rotate_left(t, g, gg);
		}
		break;   /* p is black now: done */
	}
	n[t->root].red = 0;
	return 0;
}

/* btt's seek_dist(): |s - last_end| past the last I/O's end, |s - last_start| before it; btt computes it
 * in long long (a sector of 2^63 or more overflows, and negating INT64_MIN is undefined): here the
 * larger minus the smaller, the same numbers below 2^63 */
uint64_t st_dist(stree_t *t, uint64_t s, uint64_t e)
{
	uint64_t dist;
	if ((t->last_start <= s && s <= t->last_end) || (t->last_start <= e && e <= t->last_end))
		dist = 0;
	else if (s > t->last_end)
		dist = s - t->last_end;
	else
		dist = s > t->last_start ? s - t->last_start : t->last_start - s;
	t->last_start = s;
	t->last_end = e;
	t->nseeks++;
	t->total += (double)dist;
	return dist;
}

/* btt's median: the first node in pre-order whose own count reaches the target */
static int st_btt_median(const stree_t *t, int32_t x, uint64_t target, uint64_t *out)
{
	if (x < 0)
		return 0;
	if (t->n[x].cnt >= target) {
		*out = t->n[x].key;
		return 1;
	}
	return st_btt_median(t, t->n[x].left, target, out) || st_btt_median(t, t->n[x].right, target, out);
}

static void st_inorder_median(const stree_t *t, int32_t x, uint64_t half, uint64_t *seen, uint64_t *out, int *done)
{
	if (x < 0 || *done)
		return;
	st_inorder_median(t, t->n[x].left, half, seen, out, done);
	if (*done)
		return;
	*seen += (uint64_t)t->n[x].cnt;
	if (*seen * 2 >= half) {
		*out = t->n[x].key;
		*done = 1;
		return;
	}
	st_inorder_median(t, t->n[x].right, half, seen, out, done);
}

/* btt's modes: post-order, the most frequent distances; the first MAX_MODES are kept, all counted */
#define MAX_MODES 16
typedef struct {
	uint64_t keys[MAX_MODES];
	uint64_t most;
	uint64_t nmodes;
	int first;
} modes_t;

static void st_modes(const stree_t *t, int32_t x, modes_t *m)
{
	if (x < 0)
		return;
	st_modes(t, t->n[x].left, m);
	st_modes(t, t->n[x].right, m);
	const snode_t *n = &t->n[x];
	if (m->first || n->cnt > m->most) {
		m->first = 0;
		m->nmodes = 0;
		m->most = n->cnt;
	} else if (n->cnt < m->most) {
		return;
	}
	if (m->nmodes < MAX_MODES)
		m->keys[m->nmodes] = n->key;
	m->nmodes++;
}

PyObject *st_export(const stree_t *t)
{
	uint64_t bm = 0, tm = 0, most = 0;
	int first = 1, done = 0;
	uint64_t seen = 0;
	if (t->root >= 0) {
		st_btt_median(t, t->root, t->nseeks / 2, &bm);
		st_inorder_median(t, t->root, t->nseeks, &seen, &tm, &done);
	}
	modes_t m = {.first = 1};
	if (t->root >= 0)
		st_modes(t, t->root, &m);
	most = m.most;
	(void)first;
	uint64_t keep = m.nmodes < MAX_MODES ? m.nmodes : MAX_MODES;
	PyObject *modes = PyList_New((Py_ssize_t)keep);
	if (!modes)
		return NULL;
	for (uint64_t i = 0; i < keep; i++)
		PyList_SET_ITEM(modes, (Py_ssize_t)i, PyLong_FromUnsignedLongLong(m.keys[i]));
	return Py_BuildValue("{s:K,s:d,s:K,s:K,s:N,s:K,s:K,s:i}", "n", (unsigned long long)t->nseeks, "total", t->total,
			     "btt_median", (unsigned long long)bm, "median", (unsigned long long)tm, "modes", modes,
			     "nmodes", (unsigned long long)m.nmodes, "most", (unsigned long long)most, "distinct", (int)t->nn);
}


void st_init(stree_t *t)
{
	memset(t, 0, sizeof(*t));
	t->root = -1;
}
