/* Priority queues over a fixed total order of rows, for the compiled kernels.
 *
 * When every row's place in the queue's order is known before the run (a priority rule with
 * fixed keys: the order (-key, row)), the rows are ranked once, and a queue is the set of the
 * ranks of its members: a bit per rank, with summary levels above (bit i of a level-(l+1) word
 * is set when word i of level l is non-zero), 64 ways per level. Insert, erase, minimum and
 * maximum touch one word per level (3 levels for 260,000 rows, 4 for 16 million), so their cost
 * does not grow with the queue as a binary heap's does (its depth, and its cache misses once
 * it outgrows the cache), and the bits of 1 million rows take 128 KB.
 *
 * rank_rows sorts the rows by a key with a stable radix sort (ties keep the rows' order, as the
 * tuple (key, row) orders them), in linear time: six passes over the rows at most.
 */
#ifndef MARKETSCHED_KERNEL_RANKSET_H
#define MARKETSCHED_KERNEL_RANKSET_H

#include "kernel_engine.h"

#define RS_LEVELS 8 /* 64^8 ranks: more than any run */

typedef struct {
    uint64_t *lv[RS_LEVELS];
    int nlv;
} RankSet;

static void rs_free(RankSet *s)
{
    for (int i = 0; i < s->nlv; i++) free(s->lv[i]);
    memset(s, 0, sizeof(*s));
}

/* an empty set of ranks 0..n-1; -1 when out of memory */
static int rs_init(RankSet *s, Py_ssize_t n)
{
    memset(s, 0, sizeof(*s));
    Py_ssize_t words = n > 0 ? n : 1;
    do {
        words = (words + 63) / 64;
        s->lv[s->nlv] = calloc((size_t)words, sizeof(uint64_t));
        if (!s->lv[s->nlv]) return -1;
        s->nlv++;
    } while (words > 1 && s->nlv < RS_LEVELS);
    return 0;
}

static inline int rs_empty(const RankSet *s) { return s->lv[s->nlv - 1][0] == 0; }

static inline void rs_insert(RankSet *s, uint64_t r)
{
    for (int i = 0; i < s->nlv; i++) {
        uint64_t *w = &s->lv[i][r >> 6];
        uint64_t was = *w;
        *w = was | (UINT64_C(1) << (r & 63));
        if (was) return; /* the levels above already mark this word */
        r >>= 6;
    }
}

static inline void rs_erase(RankSet *s, uint64_t r)
{
    for (int i = 0; i < s->nlv; i++) {
        uint64_t *w = &s->lv[i][r >> 6];
        *w &= ~(UINT64_C(1) << (r & 63));
        if (*w) return; /* the word still has members: the levels above stay */
        r >>= 6;
    }
}

/* the smallest rank in a non-empty set */
static inline uint64_t rs_min(const RankSet *s)
{
    uint64_t r = 0;
    for (int i = s->nlv - 1; i >= 0; i--) r = (r << 6) | (uint64_t)__builtin_ctzll(s->lv[i][r]);
    return r;
}

/* the largest rank in a non-empty set */
static inline uint64_t rs_max(const RankSet *s)
{
    uint64_t r = 0;
    for (int i = s->nlv - 1; i >= 0; i--) r = (r << 6) | (uint64_t)(63 - __builtin_clzll(s->lv[i][r]));
    return r;
}

/* The bits of x as an unsigned integer in the order of the doubles (-0.0 taken as 0.0, as a
 * comparison of doubles does; no NaN). */
static inline uint64_t ordered_bits(double x)
{
    if (x == 0.0) x = 0.0;
    uint64_t u;
    memcpy(&u, &x, sizeof(u));
    return (u >> 63) ? ~u : u | (UINT64_C(1) << 63);
}

#define RS_DIGIT 11                                   /* bits per radix pass */
#define RS_PASSES ((64 + RS_DIGIT - 1) / RS_DIGIT)    /* 6 */
#define RS_BUCKETS (1 << RS_DIGIT)

/* order[r]: the row of rank r, rank[j]: the rank of row j, in the order of (x[j], j) where
 * x[j] = sign * key[j], and (when not NULL) key_of_rank[r] = key[order[r]], the keys in rank
 * order, moved along with the rows (no pass reads them at random): an LSD radix sort on the
 * ordered bits of x, RS_DIGIT bits per pass (passes where every key has the same digit are
 * skipped). -1 when out of memory. */
static int rank_rows(const double *key, double sign, Py_ssize_t n, uint32_t *order, uint32_t *rank,
                     double *key_of_rank)
{
    size_t m = (size_t)(n ? n : 1);
    double *k0 = malloc(m * sizeof(double));
    double *k1 = malloc(m * sizeof(double));
    uint32_t *r1 = malloc(m * sizeof(uint32_t));
    Py_ssize_t(*count)[RS_BUCKETS] = calloc(RS_PASSES, sizeof(*count));
    int failed = !k0 || !k1 || !r1 || !count;
    if (!failed) {
        for (Py_ssize_t j = 0; j < n; j++) {
            uint64_t u = ordered_bits(sign * key[j]);
            k0[j] = key[j];
            order[j] = (uint32_t)j;
            for (int b = 0; b < RS_PASSES; b++) count[b][(u >> (RS_DIGIT * b)) & (RS_BUCKETS - 1)]++;
        }
        double *ks = k0, *kd = k1;
        uint32_t *rs = order, *rd = r1;
        for (int b = 0; b < RS_PASSES; b++) {
            int shift = RS_DIGIT * b;
            if (n == 0 || count[b][(ordered_bits(sign * ks[0]) >> shift) & (RS_BUCKETS - 1)] == n)
                continue; /* one digit: nothing moves */
            Py_ssize_t *start = count[b], sum = 0; /* the counts become each digit's first position */
            for (int v = 0; v < RS_BUCKETS; v++) {
                Py_ssize_t c = start[v];
                start[v] = sum;
                sum += c;
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                Py_ssize_t at = start[(ordered_bits(sign * ks[i]) >> shift) & (RS_BUCKETS - 1)]++;
                kd[at] = ks[i];
                rd[at] = rs[i];
            }
            double *kt = ks;
            ks = kd;
            kd = kt;
            uint32_t *rt = rs;
            rs = rd;
            rd = rt;
        }
        if (rs != order) memcpy(order, rs, (size_t)n * sizeof(uint32_t));
        if (key_of_rank) memcpy(key_of_rank, ks, (size_t)n * sizeof(double));
        for (Py_ssize_t r = 0; r < n; r++) rank[order[r]] = (uint32_t)r;
    }
    free(k0);
    free(k1);
    free(r1);
    free(count);
    return failed ? -1 : 0;
}

#endif
