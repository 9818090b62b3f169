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

#define ST_LEVELS 64

typedef struct {
    double *lv[ST_LEVELS];
    int64_t len[ST_LEVELS], cap[ST_LEVELS];
} SumTree;

static inline int64_t st_count(const SumTree *s) { return s->len[0]; }

static int st_push_level(SumTree *s, int h, double x)
{
    if (s->len[h] == s->cap[h]) {
        int64_t cap = s->cap[h] ? 2 * s->cap[h] : 64;
        double *p = realloc(s->lv[h], (size_t)cap * sizeof(double));
        if (!p) return -1;
        s->lv[h] = p;
        s->cap[h] = cap;
    }
    s->lv[h][s->len[h]++] = x;
    return 0;
}

/* IntervalSums.append; -1 when an allocation failed */
static int st_append(SumTree *s, double amount)
{
    int64_t i = s->len[0];
    if (st_push_level(s, 0, amount) < 0) return -1;
    int h = 0;
    while (i & 1) {
        const double *below = s->lv[h];
        h++;
        if (st_push_level(s, h, below[i - 1] + below[i]) < 0) return -1;
        i >>= 1;
    }
    return 0;
}

/* IntervalSums.since: the sum of leaves [lo, count) */
static double st_since(const SumTree *s, int64_t lo)
{
    int64_t hi = s->len[0];
    double sum = 0.0;
    int h = 0;
    while (lo < hi) {
        if (lo & 1) {
            sum += s->lv[h][lo];
            lo++;
        }
        if (hi & 1) {
            hi--;
            sum += s->lv[h][hi];
        }
        lo >>= 1;
        hi >>= 1;
        h++;
    }
    return sum;
}

static void st_free(SumTree *s)
{
    for (int h = 0; h < ST_LEVELS; h++) free(s->lv[h]);
}

#endif
