/* Sums of non-negative amounts over a run of consecutive intervals, without cancellation: the C
 * twin of marketsched.mechanisms.online.interval_sums.IntervalSums (see its docstring), with the
 * same additions in the same order, so both give the same bits.
 *
 * Level 0 holds one amount per interval (leaf); a node of level h + 1 is the sum of two nodes of
 * level h, appended when its right child is (a binary counter's carry: O(1) amortised). The sum
 * of leaves [lo, count) is the bottom-up walk of a segment tree: O(log leaves) complete nodes.
 */
#ifndef MARKETSCHED_KERNEL_SUMTREE_H
#define MARKETSCHED_KERNEL_SUMTREE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_alloc.h"

#define ST_LEVELS 64

/* Node i of level h sits at ST_AT(h, i) = i 2^(h+1) + 2^h - 1 (in-order: a parent between its
 * children, leaf i at 2 i), so the nodes a walk visits on lo's side lie near each other in memory
 * for the low levels, where most walks end. */
#define ST_AT(h, i) (((i) << ((h) + 1)) + (((int64_t)1 << (h)) - 1))

typedef struct {
    double *buf;                /* every level, in-order (ST_AT) */
    int64_t len[ST_LEVELS];     /* nodes of level h so far */
    int64_t cap;                /* leaves at most */
    double pending;             /* intervals added since the last leaf (IntervalSums.pending) */
    int full;                   /* a leaf did not fit (cannot happen when st_init was told right) */
} SumTree;

/* Room for at most `leaves` leaves (level h holds at most leaves >> h nodes); pages of the buffer
 * are touched only as leaves come. -1 when the allocation failed. */
static int st_init(SumTree *s, int64_t leaves)
{
    memset(s, 0, sizeof(*s));
    if (leaves < 1) leaves = 1;
    s->cap = leaves;
    /* ST_AT(h, i) < 2 leaves for i < leaves >> h; a long queue fills a leaf at almost every
     * batch, and a large tree is touched page after page (big_alloc: huge pages) */
    s->buf = big_alloc(2 * (size_t)leaves * sizeof(double));
    return s->buf ? 0 : -1;
}

/* IntervalSums.add */
static inline void st_add(SumTree *s, double amount) { s->pending += amount; }

/* IntervalSums._flush: the pending amount becomes a leaf (none when it is 0) */
static inline void st_flush(SumTree *s)
{
    double amount = s->pending;
    if (amount == 0.0) return;
    s->pending = 0.0;
    int64_t i = s->len[0];
    if (i >= s->cap) {
        s->full = 1;
        return;
    }
    double *buf = s->buf;
    buf[ST_AT(0, i)] = amount;
    s->len[0] = i + 1;
    int h = 0;
    while (i & 1) {
        double x = buf[ST_AT(h, i - 1)] + buf[ST_AT(h, i)];
        h++;
        i >>= 1;
        buf[ST_AT(h, i)] = x;
        s->len[h] = i + 1;
    }
}

/* IntervalSums.mark */
static inline int64_t st_mark(SumTree *s)
{
    st_flush(s);
    return s->len[0];
}

/* IntervalSums.since: the sum of leaves [lo, count), after the pending amount became one; the
 * nodes on lo's side and on hi's are summed apart (two independent chains), then added. Without
 * branches on the bits of lo and hi (they are unpredictable): a node not taken adds +0.0, which
 * leaves a sum that starts at +0.0 unchanged, so the bits are those of the reference. The nodes
 * read exist: lo < hi. */
static inline double st_since(SumTree *s, int64_t lo)
{
    static const double zero = 0.0;
    st_flush(s);
    int64_t hi = s->len[0];
    const double *buf = s->buf;
    double left = 0.0, right = 0.0; /* the nodes on lo's side and on hi's: two independent chains */
    int h = 0;
    while (lo < hi) {
        int64_t l1 = lo & 1, h1 = hi & 1;
        /* select the node or zero with masks: compilers turn a ?: back into a branch */
        uintptr_t z = (uintptr_t)&zero, ml = (uintptr_t)0 - (uintptr_t)l1, mh = (uintptr_t)0 - (uintptr_t)h1;
        left += *(const double *)(z ^ (((uintptr_t)(buf + ST_AT(h, lo)) ^ z) & ml));
        right += *(const double *)(z ^ (((uintptr_t)(buf + ST_AT(h, hi - 1)) ^ z) & mh));
        lo = (lo + l1) >> 1;
        hi = (hi - h1) >> 1;
        h++;
    }
    return left + right;
}

static void st_free(SumTree *s) { free(s->buf); }

/* marketsched.mechanisms.online.interval_sums.TimeSum: a running total of time spans as a
 * double-double (hi + lo), the same operations in the same order (see its docstring for why a
 * compensated total suffices for time). */
typedef struct {
    double hi, lo;
} TimeSum;

static inline void ts_add(TimeSum *s, double dt)
{
    double hi = s->hi;
    double sum = hi + dt;
    double b = sum - hi;
    double e = ((hi - (sum - b)) + (dt - b)) + s->lo;
    double h = sum + e;
    s->hi = h;
    s->lo = e - (h - sum);
}

/* TimeSum.since: the time added since the reading (mark_hi, mark_lo) */
static inline double ts_since(const TimeSum *s, double mark_hi, double mark_lo)
{
    return (s->hi - mark_hi) + (s->lo - mark_lo);
}

#endif
