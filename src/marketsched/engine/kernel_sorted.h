/* An ordered set of (k, j) pairs (a double and a row, in tuple order: k, then j) for the compiled
 * kernels: the C counterpart of a Python list kept sorted with bisect.insort / del, with the same
 * order and the same bisect positions, so a walk in order visits the pairs exactly as the Python
 * reference's list does. A sorted list of blocks: each block a sorted C array of at most
 * SP_MAX pairs, the blocks in order, with each block's last pair kept aside for the search. An
 * insert or delete shifts one block (at most SP_MAX pairs) and, when a block splits, merges or
 * empties, the short array of blocks, instead of the whole set: on a machine with tens of
 * thousands of running jobs that replaces a shift of the whole set on every start and completion.
 * Pairs must be unique (rows are).
 */
#ifndef MARKETSCHED_KERNEL_SORTED_H
#define MARKETSCHED_KERNEL_SORTED_H

#include "kernel_engine.h"

#ifndef SP_MAX
#define SP_MAX 512 /* pairs per block at most; a full block splits in two halves */
#endif

typedef struct {
    double k;
    int64_t j;
} Pair;

typedef struct {
    Pair **blocks;
    Py_ssize_t *sizes;
    Pair *last;            /* last[b]: the greatest pair of block b */
    Py_ssize_t nblocks, capblocks;
    Py_ssize_t n;          /* pairs in all */
} SortedPairs;

/* a position: pair i of block b; (nblocks, 0) is the end */
typedef struct {
    Py_ssize_t b, i;
} SpPos;

static inline int pair_lt(double k0, int64_t j0, double k1, int64_t j1)
{
    return k0 < k1 || (k0 == k1 && j0 < j1);
}

static void sp_free(SortedPairs *s)
{
    for (Py_ssize_t b = 0; b < s->nblocks; b++) free(s->blocks[b]);
    free(s->blocks);
    free(s->sizes);
    free(s->last);
    memset(s, 0, sizeof(*s));
}

/* first block whose last pair is >= (k, j) (nblocks when none) */
static inline Py_ssize_t sp_block_left(const SortedPairs *s, double k, int64_t j)
{
    Py_ssize_t lo = 0, hi = s->nblocks;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (pair_lt(s->last[mid].k, s->last[mid].j, k, j)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* first block whose last pair is > (k, j) (nblocks when none) */
static inline Py_ssize_t sp_block_right(const SortedPairs *s, double k, int64_t j)
{
    Py_ssize_t lo = 0, hi = s->nblocks;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (pair_lt(k, j, s->last[mid].k, s->last[mid].j)) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* bisect_right: the position of the first pair > (k, j) */
static SpPos sp_bisect_right(const SortedPairs *s, double k, int64_t j)
{
    SpPos p = {sp_block_right(s, k, j), 0};
    if (p.b == s->nblocks) return p;
    const Pair *a = s->blocks[p.b];
    Py_ssize_t lo = 0, hi = s->sizes[p.b];
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (pair_lt(k, j, a[mid].k, a[mid].j)) hi = mid;
        else lo = mid + 1;
    }
    p.i = lo;
    return p;
}

static inline int sp_pos_eq(SpPos a, SpPos b) { return a.b == b.b && a.i == b.i; }

static inline const Pair *sp_at(const SortedPairs *s, SpPos p) { return &s->blocks[p.b][p.i]; }

static inline SpPos sp_begin(const SortedPairs *s)
{
    (void)s;
    SpPos p = {0, 0};
    return p;
}

static inline int sp_done(const SortedPairs *s, SpPos p) { return p.b >= s->nblocks; }

static inline SpPos sp_next(const SortedPairs *s, SpPos p)
{
    if (++p.i == s->sizes[p.b]) {
        p.b++;
        p.i = 0;
    }
    return p;
}

/* room for one more block at index b (blocks b.. move up by one) */
static int sp_open_block(SortedPairs *s, Py_ssize_t b)
{
    if (s->nblocks == s->capblocks) {
        Py_ssize_t cap = s->capblocks ? 2 * s->capblocks : 16;
        Pair **bl = realloc(s->blocks, (size_t)cap * sizeof(Pair *));
        if (!bl) return -1;
        s->blocks = bl;
        Py_ssize_t *sz = realloc(s->sizes, (size_t)cap * sizeof(Py_ssize_t));
        if (!sz) return -1;
        s->sizes = sz;
        Pair *la = realloc(s->last, (size_t)cap * sizeof(Pair));
        if (!la) return -1;
        s->last = la;
        s->capblocks = cap;
    }
    Pair *blk = malloc(SP_MAX * sizeof(Pair));
    if (!blk) return -1;
    Py_ssize_t m = s->nblocks - b;
    memmove(s->blocks + b + 1, s->blocks + b, (size_t)m * sizeof(Pair *));
    memmove(s->sizes + b + 1, s->sizes + b, (size_t)m * sizeof(Py_ssize_t));
    memmove(s->last + b + 1, s->last + b, (size_t)m * sizeof(Pair));
    s->blocks[b] = blk;
    s->sizes[b] = 0;
    s->nblocks++;
    return 0;
}

static void sp_close_block(SortedPairs *s, Py_ssize_t b)
{
    free(s->blocks[b]);
    Py_ssize_t m = s->nblocks - b - 1;
    memmove(s->blocks + b, s->blocks + b + 1, (size_t)m * sizeof(Pair *));
    memmove(s->sizes + b, s->sizes + b + 1, (size_t)m * sizeof(Py_ssize_t));
    memmove(s->last + b, s->last + b + 1, (size_t)m * sizeof(Pair));
    s->nblocks--;
}

/* insort (k, j); -1 when out of memory */
static int sp_insert(SortedPairs *s, double k, int64_t j)
{
    if (!s->nblocks && sp_open_block(s, 0) < 0) return -1;
    Py_ssize_t b = sp_block_right(s, k, j);
    if (b == s->nblocks) b--; /* greater than every pair: the end of the last block */
    if (s->sizes[b] == SP_MAX) { /* split the full block in two halves */
        if (sp_open_block(s, b + 1) < 0) return -1;
        Py_ssize_t h = SP_MAX / 2;
        memcpy(s->blocks[b + 1], s->blocks[b] + h, (size_t)(SP_MAX - h) * sizeof(Pair));
        s->sizes[b + 1] = SP_MAX - h;
        s->last[b + 1] = s->last[b];
        s->sizes[b] = h;
        s->last[b] = s->blocks[b][h - 1];
        if (pair_lt(s->last[b].k, s->last[b].j, k, j)) b++;
    }
    Pair *a = s->blocks[b];
    Py_ssize_t lo = 0, hi = s->sizes[b];
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (pair_lt(k, j, a[mid].k, a[mid].j)) hi = mid;
        else lo = mid + 1;
    }
    memmove(a + lo + 1, a + lo, (size_t)(s->sizes[b] - lo) * sizeof(Pair));
    a[lo].k = k;
    a[lo].j = j;
    if (lo == s->sizes[b]) s->last[b] = a[lo];
    s->sizes[b]++;
    s->n++;
    return 0;
}

/* del the pair (k, j), which must be present (0), or -1 when it is not */
static int sp_delete(SortedPairs *s, double k, int64_t j)
{
    Py_ssize_t b = sp_block_left(s, k, j);
    if (b == s->nblocks) return -1;
    Pair *a = s->blocks[b];
    Py_ssize_t lo = 0, hi = s->sizes[b];
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (pair_lt(a[mid].k, a[mid].j, k, j)) lo = mid + 1;
        else hi = mid;
    }
    if (lo == s->sizes[b] || a[lo].k != k || a[lo].j != j) return -1;
    Py_ssize_t size = --s->sizes[b];
    memmove(a + lo, a + lo + 1, (size_t)(size - lo) * sizeof(Pair));
    s->n--;
    if (!size) {
        sp_close_block(s, b);
        return 0;
    }
    s->last[b] = a[size - 1];
    /* a block under a quarter full takes in the next one when both fit in one block */
    if (size < SP_MAX / 4 && b + 1 < s->nblocks && size + s->sizes[b + 1] <= SP_MAX / 2) {
        memcpy(a + size, s->blocks[b + 1], (size_t)s->sizes[b + 1] * sizeof(Pair));
        s->sizes[b] += s->sizes[b + 1];
        s->last[b] = s->last[b + 1];
        sp_close_block(s, b + 1);
    }
    return 0;
}

#endif
