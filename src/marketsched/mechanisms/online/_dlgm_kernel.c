/* DLGM and P-DLGM (Stößer 2009, sections 5.3-5.4, after Heydenreich, Müller & Uetz 2006), the
 * engine loop and the rule in C.
 *
 * Python reference: marketsched.mechanisms.online.dlgm.DLGM (the rule) driven by
 * marketsched.engine.simulator.Simulator (the loop); read their docstrings for the mechanism,
 * its decisions and the event order. This file does the same operations in the same order, so
 * that every record and every float (tentative completion and payment, credits, net payments)
 * is bit for bit the reference's:
 *
 *   - batches (the engine loop of kernel_engine.h): completions first (in job order), then
 *     arrivals in job order, then (start rule "after-arrivals") the idle nodes with waiting jobs
 *     in node order, then the engine starts each node's job; a zero-length job completes
 *     during its arrival (see the last item);
 *   - per-node aggregates of the waiting jobs: two Fenwick trees over ratio buckets (rows) x
 *     nodes, W of work over bucket positions and R of weight over reversed positions, each cell
 *     a compensated sum (sum, rounding error, count) updated as the reference's _flush does, in
 *     the reference's order (per cell); a prefix is the first row of the query path
 *     plus the others in path order (numpy's sum over axis 0 of W[path, :m]); a cell whose
 *     count goes back to 0 is reset to 0.0 at once (the reference's _flush, round by round);
 *   - the waiting jobs of the arriving job's own bucket are added in the order they joined it
 *     (the reference keeps them in an insertion-ordered dict);
 *   - the credit ledger: one Fenwick tree of run times per node, compensated like the reference's
 *     (TwoSum into each cell's error; read as a sum and an error from 0.0 along the path);
 *   - the offers of an identical successor in the same batch reuse the previous arrival's,
 *     adjusted on its node, exactly as the reference's cache does;
 *   - a zero-length job completes in its arrival batch without taking a node (the zero-run-time
 *     rule of the reference's DLGM._complete_on_arrival).
 *
 * Compiled without -ffast-math and with -ffp-contract=off: w*A + d*B must not become a fused
 * multiply-add where the reference rounds twice.
 */
#include "../../engine/kernel_engine.h" /* the engine loop, shared with the other kernels */

typedef struct {
    Engine e; /* the engine's columns: remaining work, running, the records */
    Py_ssize_t n;
    int m, nb, preemptive, immediate, all_positive;
    /* inputs */
    const double *submit, *d, *v, *w, *lo;
    const int32_t *bucket0, *forced, *rank; /* forced, rank: NULL when unused */
    /* outputs besides the records */
    double *tent_e, *tent_p, *received;
    int64_t *node_out;
    /* per job */
    double *ratio, *base, *base_lo, *credit; /* a waiting job's work in the aggregates is its remaining work */
    int32_t *bucket_of, *mnext, *mprev;
    /* per bucket: waiting jobs in joining order (a doubly linked list) */
    int32_t *mhead, *mtail;
    /* per node */
    /* Trees of the waiting jobs, (nb + 1) rows of 3m: the sums (m), then per node the sum's
     * rounding error and the count of jobs (2m, interleaved). W: work, bucket positions; R:
     * weight, reversed positions. */
    double *W, *R;
    double *G;  /* m x 2(nb + 1): run times of all jobs that ever joined the node (sum, error) */
    double *run_v, *run_fin;
    int64_t *qlen;
    int32_t *run_job;
    char *busy, *in_idle, *queued_idle, *to_start_flag;
    int32_t **q;  /* per node: binary heap of waiting jobs, highest ratio first, ties lower job */
    Py_ssize_t *qsize, *qcap;
    int32_t *idle;  /* min-heap of node indices (lazy, as the reference's) */
    int nidle;
    int32_t *to_start, *idle_queued;
    int nto, nidle_queued;
    Py_ssize_t preemption_count;
    /* offers of the last arrival (the reference's cache) and scratch rows */
    int cache_valid;
    double cv, cd, cw;
    double *A, *B, *cost, *va, *wa;
    char *ra;
    int32_t *order;
} K;

/* ---------------------------------------------------------------- small heaps */
static inline int q_before(const K *k, int32_t a, int32_t b) {
    /* (-ratio, job) order of the reference's heapq entries */
    double ra = -k->ratio[a], rb = -k->ratio[b];
    if (ra != rb) return ra < rb;
    return a < b;
}

static int q_push(K *k, int node, int32_t job) {
    Py_ssize_t s = k->qsize[node];
    if (s == k->qcap[node]) {
        Py_ssize_t cap = k->qcap[node] ? 2 * k->qcap[node] : 4;
        int32_t *p = realloc(k->q[node], (size_t)cap * sizeof(int32_t));
        if (!p) return -1;
        k->q[node] = p;
        k->qcap[node] = cap;
    }
    int32_t *h = k->q[node];
    Py_ssize_t i = s;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (!q_before(k, job, h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = job;
    k->qsize[node] = s + 1;
    return 0;
}

static int32_t q_pop(K *k, int node) {
    int32_t *h = k->q[node];
    int32_t top = h[0];
    Py_ssize_t s = --k->qsize[node];
    if (s > 0) {
        int32_t last = h[s];
        Py_ssize_t i = 0;
        for (;;) {
            Py_ssize_t c = 2 * i + 1;
            if (c >= s) break;
            if (c + 1 < s && q_before(k, h[c + 1], h[c])) c++;
            if (!q_before(k, h[c], last)) break;
            h[i] = h[c];
            i = c;
        }
        h[i] = last;
    }
    return top;
}

static void idle_push(K *k, int32_t node) {
    if (k->in_idle[node]) return; /* a node is in the heap at most once (same answers) */
    k->in_idle[node] = 1;
    int32_t *h = k->idle;
    int i = k->nidle++;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (h[parent] <= node) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = node;
}

static int32_t idle_pop(K *k) {
    int32_t *h = k->idle;
    int32_t top = h[0];
    int s = --k->nidle;
    if (s > 0) {
        int32_t last = h[s];
        int i = 0;
        for (;;) {
            int c = 2 * i + 1;
            if (c >= s) break;
            if (c + 1 < s && h[c + 1] < h[c]) c++;
            if (h[c] >= last) break;
            h[i] = h[c];
            i = c;
        }
        h[i] = last;
    }
    k->in_idle[top] = 0;
    return top;
}

/* ---------------------------------------------------------------- the rule */
/* the reference's _credit_reading: (sum, rounding error) along the path */
static void credit_reading(const K *k, int node, int b, double *sum, double *err) {
    const double *g = k->G + (size_t)node * 2 * (k->nb + 1);
    double s = 0.0, c = 0.0;
    for (int i = b; i > 0; i -= i & -i) {
        double x = g[2 * i];
        double t = s + x;
        double bp = t - s;
        c += ((s - (t - bp)) + (x - bp)) + g[2 * i + 1];
        s = t;
    }
    *sum = s;
    *err = c;
}

/* the reference's _credit_since */
static void credit_since(K *k, int32_t j, int node, int b) {
    double s, c;
    credit_reading(k, node, b, &s, &c);
    k->credit[j] += (s - k->base[j]) + (c - k->base_lo[j]);
    k->base[j] = s;
    k->base_lo[j] = c;
}

/* the reference's _flush on one cell: a compensated sum (TwoSum twice; when the sum is exact and
 * no error is pending, the second TwoSum would give (s, 0) and is skipped) */
static void cell_add(double *hi_p, double *lc, double x, double cnt) {
    double hi = *hi_p;
    double s = hi + x;
    double bp = s - hi;
    double e = (hi - (s - bp)) + (x - bp);
    if (e == 0.0 && lc[0] == 0.0) {
        *hi_p = s;
    } else {
        e = e + lc[0];
        double h = s + e;
        bp = h - s;
        lc[0] = (s - (h - bp)) + (e - bp);
        *hi_p = h;
    }
    lc[1] += cnt;
    if (lc[1] == 0.0) *hi_p = lc[0] = 0.0; /* the last job left: exact zeros */
}

/* the reference's pending row (pos, node, weight, work, count): W along pos, R along nb + 1 - pos */
static void w_update(K *k, int pos, int node, double wv, double work, double cnt) {
    size_t m = (size_t)k->m;
    for (int i = pos; i <= k->nb; i += i & -i) {
        double *row = k->W + (size_t)i * 3 * m;
        cell_add(row + node, row + m + 2 * (size_t)node, work, cnt);
    }
    for (int i = k->nb + 1 - pos; i <= k->nb; i += i & -i) {
        double *row = k->R + (size_t)i * 3 * m;
        cell_add(row + node, row + m + 2 * (size_t)node, wv, cnt);
    }
}

/* prefix 1..p of a tree's value rows into out (numpy's sum over axis 0 of T[path, :m]) */
static void tree_prefix(const double *T, int p, size_t m, double *out) {
    if (p > 0) {
        memcpy(out, T + (size_t)p * 3 * m, m * sizeof(double));
        for (int i = p - (p & -p); i > 0; i -= i & -i) {
            const double *row = T + (size_t)i * 3 * m;
            for (size_t x = 0; x < m; x++) out[x] += row[x];
        }
    } else {
        memset(out, 0, m * sizeof(double));
    }
}

static void book_credit(K *k, int32_t j) {
    double amount = k->v[j] * k->credit[j];
    k->credit[j] = 0.0;
    if (amount != 0.0 || amount != amount) {
        k->received[j] += amount;
        k->e.payment[j] += -amount;
    }
}

static void start(K *k, int node, int32_t j) {
    k->run_job[node] = j;
    k->run_v[node] = k->v[j];
    k->run_fin[node] = k->e.now + k->e.job[j].remaining;
    k->busy[node] = 1;
    if (!k->to_start_flag[node]) {
        k->to_start_flag[node] = 1;
        k->to_start[k->nto++] = node;
    }
}

/* j joins the node's queue with its current ratio (b < 0: the bucket of that ratio) */
static int enqueue(K *k, int node, int32_t j, double ratio, int b) {
    if (b < 0) { /* bisect_right over the ascending lows, minus one */
        int lo_i = 0, hi_i = k->nb; /* count of lows <= ratio, lows ascending = lo reversed */
        while (lo_i < hi_i) {
            int mid = (lo_i + hi_i) / 2;
            if (ratio < k->lo[k->nb - 1 - mid]) hi_i = mid;
            else lo_i = mid + 1;
        }
        int i = lo_i - 1;
        b = k->nb - 1 - (i > 0 ? i : 0);
    }
    k->ratio[j] = ratio;
    k->bucket_of[j] = b;
    double vj = k->v[j];
    w_update(k, b + 1, node, vj, k->e.job[j].remaining, 1.0);
    k->qlen[node] += 1;
    k->mnext[j] = -1;
    k->mprev[j] = k->mtail[b];
    if (k->mtail[b] >= 0) k->mnext[k->mtail[b]] = j;
    else k->mhead[b] = j;
    k->mtail[b] = j;
    credit_reading(k, node, b, &k->base[j], &k->base_lo[j]);
    return q_push(k, node, j);
}

static void dequeue_and_start(K *k, int node) {
    int32_t j = q_pop(k, node);
    int b = k->bucket_of[j];
    double vj = k->v[j];
    w_update(k, b + 1, node, -vj, -k->e.job[j].remaining, -1.0);
    k->qlen[node] -= 1;
    int32_t p = k->mprev[j], nx = k->mnext[j];
    if (p >= 0) k->mnext[p] = nx;
    else k->mhead[b] = nx;
    if (nx >= 0) k->mprev[nx] = p;
    else k->mtail[b] = p;
    credit_since(k, j, node, b);
    k->bucket_of[j] = -1;
    start(k, node, j);
}

static void complete(K *k, int32_t c) {
    int node = (int)k->node_out[c];
    book_credit(k, c);
    k->run_job[node] = -1;
    k->run_v[node] = 0.0;
    k->run_fin[node] = 0.0;
    k->busy[node] = 0;
    if (k->qsize[node] == 0) {
        idle_push(k, node);
    } else if (k->immediate) {
        dequeue_and_start(k, node);
    } else if (!k->queued_idle[node]) {
        k->queued_idle[node] = 1;
        k->idle_queued[k->nidle_queued++] = node;
    }
}

/* Per node: work ahead of j (A), weight it would displace (B), whether the running job is ahead
 * (the reference's DLGM._offers: both sums directly over the jobs they count). */
static void offers(K *k, int32_t j, double t) {
    const int m = k->m;
    const size_t M = (size_t)m;
    double rho = k->ratio[j];
    int b = k->bucket0[j];
    int whole = rho == k->lo[b];
    int p = whole ? b + 1 : b;
    double *va = k->va, *wa = k->wa;
    tree_prefix(k->W, p, M, wa);
    tree_prefix(k->R, k->nb - 1 - b, M, va); /* reversed positions 1..nb-1-b: the buckets below b */
    if (!whole) {
        for (int32_t q = k->mhead[b]; q >= 0; q = k->mnext[q]) {
            int nq = (int)k->node_out[q];
            if (k->ratio[q] >= rho) wa[nq] += k->e.job[q].remaining;
            else va[nq] += k->v[q];
        }
    }
    double *A = k->A, *B = k->B;
    char *ra = k->ra;
    for (int x = 0; x < m; x++) {
        double rem = k->run_fin[x] - t;
        if (rem < 0.0) rem = 0.0; /* numpy.maximum(rem, 0.0) */
        if (k->preemptive) {
            int ahead = (k->run_v[x] / rem) >= rho; /* idle: 0/0 = NaN, not ahead; a running job has rem > 0 */
            ra[x] = (char)ahead;
            A[x] = wa[x] + rem * (ahead ? 1.0 : 0.0);
            B[x] = va[x] + k->run_v[x] * (ahead ? 0.0 : 1.0);
        } else {
            ra[x] = k->busy[x];
            A[x] = wa[x] + rem;
            B[x] = va[x];
        }
    }
}

/* numpy.argsort(cost, kind="stable") order: by cost, NaN last, ties by node */
static int cost_before(const double *cost, int32_t a, int32_t b) {
    double x = cost[a], y = cost[b];
    int xn = x != x, yn = y != y;
    if (xn != yn) return yn;
    if (!xn && x != y) return x < y;
    return a < b;
}

/* The node of rank r (1 = best) by cost: a stable insertion sort (node lies only: rare). */
static int32_t node_of_rank(const K *k, int r) {
    int32_t *o = k->order;
    for (int x = 0; x < k->m; x++) {
        int y = x;
        while (y > 0 && cost_before(k->cost, x, o[y - 1])) {
            o[y] = o[y - 1];
            y--;
        }
        o[y] = x;
    }
    return o[r - 1];
}

static int arrive(K *k, int32_t j, double t) {
    double v = k->v[j], d = k->d[j], w = k->w[j];
    int forced = k->forced ? k->forced[j] : -1;
    int rank = k->rank ? k->rank[j] : 1;
    int node = -1;
    int cached = k->cache_valid;
    k->cache_valid = 0;
    double ahead = 0.0, displaced_v = 0.0;
    int run_ahead_n = 0;
    if (d == 0) { /* the zero-run-time rule (DLGM._complete_on_arrival): done at t, no node held */
        node = forced >= 0 ? forced : rank - 1;
        k->node_out[j] = node;
        k->tent_e[j] = t;
        k->tent_p[j] = 0.0;
        Engine *e = &k->e; /* ClusterState.finish without a start: no processor taken */
        e->job[j].first_start = t; /* the record: eng_conclude_job writes it to the column */
        e->state[j] = ST_COMPLETED;
        e->end_time[j] = t;
        e->job[j].remaining = 0.0;
        return 0;
    }
    if (forced < 0 && rank == 1 && k->all_positive) {
        while (k->nidle && (k->busy[k->idle[0]] || k->qlen[k->idle[0]])) idle_pop(k);
        if (k->nidle) node = idle_pop(k);
    }
    if (node < 0) {
        const int m = k->m;
        double *A = k->A, *B = k->B, *cost = k->cost;
        if (!(cached && k->cv == v && k->cd == d && k->cw == w)) {
            offers(k, j, t);
            for (int x = 0; x < m; x++) cost[x] = w * A[x] + d * B[x];
        }
        if (forced >= 0) {
            node = forced;
        } else if (rank == 1) {
            node = 0;
            double best = cost[0];
            if (best == best) {
                for (int x = 1; x < m; x++) {
                    double c = cost[x];
                    if (c != c) { node = x; break; }
                    if (c < best) { best = c; node = x; }
                }
            }
        } else {
            node = node_of_rank(k, rank);
        }
        ahead = A[node];
        double bn = B[node];
        displaced_v = (0.0 > bn) ? 0.0 : bn; /* Python's max(B[n], 0.0) */
        run_ahead_n = k->ra[node];
        A[node] += d;
        cost[node] = w * A[node] + d * B[node];
        if (k->preemptive && (k->run_job[node] < 0 || !run_ahead_n)) k->ra[node] = 1;
        k->cache_valid = 1;
        k->cv = v;
        k->cd = d;
        k->cw = w;
    }
    k->node_out[j] = node;
    double e_hat = t + d + ahead;
    double p_hat = d * displaced_v;
    k->tent_e[j] = e_hat;
    k->tent_p[j] = p_hat;
    if (p_hat != 0.0 || p_hat != p_hat) k->e.payment[j] += p_hat;
    int32_t run = k->run_job[node];
    if (run < 0 && k->immediate) {
        start(k, node, j);
        return 0;
    }
    {
        int b = k->bucket0[j];
        double *g = k->G + (size_t)node * 2 * (k->nb + 1);
        for (int i = b + 1; i <= k->nb; i += i & -i) { /* TwoSum: the error goes to the cell's error */
            double hi = g[2 * i];
            double t = hi + d;
            double bp = t - hi;
            g[2 * i + 1] += (hi - (t - bp)) + (d - bp);
            g[2 * i] = t;
        }
        double rho = k->ratio[j];
        if (rho != k->lo[b]) {
            for (int32_t q = k->mhead[b]; q >= 0; q = k->mnext[q])
                if (k->node_out[q] == node && k->ratio[q] < rho) k->credit[q] += d;
        }
    }
    if (run >= 0 && k->preemptive && !run_ahead_n) {
        k->credit[run] += d;
        if (eng_running(&k->e, run)) { /* the engine's preempt: it keeps its remaining work */
            eng_preempt(&k->e, run);
            k->preemption_count++;
        }
        double rem = k->e.job[run].remaining;
        if (enqueue(k, node, run, rem > 0 ? k->v[run] / rem : INFINITY, -1)) return -1;
        start(k, node, j);
    } else {
        if (enqueue(k, node, j, k->ratio[j], k->bucket0[j])) return -1;
        if (run < 0) {
            if (!k->queued_idle[node]) {
                k->queued_idle[node] = 1;
                k->idle_queued[k->nidle_queued++] = node;
            }
        }
    }
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* DLGM.step: the batch at t (the engine has completed e.completed; rows [first, last) arrive). */
static int step(void *policy, double t, Py_ssize_t first, Py_ssize_t last) {
    K *k = policy;
    Engine *e = &k->e;
    k->cache_valid = 0;
    for (Py_ssize_t c = 0; c < e->ncompleted; c++) complete(k, (int32_t)e->completed[c]);
    for (Py_ssize_t a = first; a < last; a++)
        if (arrive(k, (int32_t)a, t)) return -1;
    if (k->nidle_queued) {
        qsort(k->idle_queued, (size_t)k->nidle_queued, sizeof(int32_t), cmp_i32);
        for (int x = 0; x < k->nidle_queued; x++) {
            int node = k->idle_queued[x];
            k->queued_idle[node] = 0;
            dequeue_and_start(k, node);
        }
        k->nidle_queued = 0;
    }
    for (int x = 0; x < k->nto; x++) { /* the engine starts each node's job once the batch is decided */
        int node = k->to_start[x];
        k->to_start_flag[node] = 0;
        int32_t j = k->run_job[node];
        if (j >= 0 && !eng_running(e, j) && eng_start(e, j)) return -1;
    }
    k->nto = 0;
    return 0;
}

/* ---------------------------------------------------------------- Python entry point */
static void *zalloc(size_t count, size_t size, int *fail) {
    void *p = calloc(count ? count : 1, size);
    if (!p) *fail = 1;
    return p;
}

static void release(K *k) {
    void *blocks[] = {k->ratio, k->base, k->base_lo, k->credit, k->bucket_of, k->mnext, k->mprev,
                      k->mhead, k->mtail, k->W, k->R, k->G, k->run_v, k->run_fin, k->qlen, k->run_job, k->busy,
                      k->in_idle, k->queued_idle, k->to_start_flag, k->qsize, k->qcap, k->idle, k->to_start, k->idle_queued, k->A, k->B, k->cost, k->va, k->wa, k->ra,
                      k->order};
    if (k->q) {
        for (int x = 0; x < k->m; x++) free(k->q[x]);
        free(k->q);
    }
    for (size_t x = 0; x < sizeof(blocks) / sizeof(blocks[0]); x++) free(blocks[x]);
    eng_free(&k->e);
}

static PyObject *run(PyObject *self, PyObject *args) {
    Py_buffer bsub, bd, bv, bw, bbucket, blo, bforced, brank;
    Py_buffer ofs, oend, opre, opay, ostate, ote, otp, orec, onode;
    int m, preemptive, immediate, all_positive;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*iiiiw*w*w*w*w*w*w*w*w*", &bsub, &bd, &bv, &bw, &bbucket, &blo,
                          &bforced, &brank, &m, &preemptive, &immediate, &all_positive, &ofs, &oend, &opre, &opay,
                          &ostate, &ote, &otp, &orec, &onode))
        return NULL;
    Py_buffer *all[] = {&bsub, &bd, &bv, &bw, &bbucket, &blo, &bforced, &brank,
                        &ofs, &oend, &opre, &opay, &ostate, &ote, &otp, &orec, &onode};
    PyObject *result = NULL;
    Py_buffer *records[5] = {&ofs, &oend, &opre, &opay, &ostate};
    K k;
    memset(&k, 0, sizeof(k));
    if (eng_init(&k.e, m, &bsub, &bd, NULL, records)) goto done; /* serial jobs: checked by the caller */
    Py_ssize_t n = k.e.n;
    int nb = (int)(blo.len / (Py_ssize_t)sizeof(double));
    if (nb < 1 || n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "_dlgm_kernel.run: needs >= 1 ratio bucket and < 2**31 jobs");
        goto done;
    }
    if (check_buffer(&bv, "bid", n, 8) || check_buffer(&bw, "choice weight", n, 8) ||
        check_buffer(&bbucket, "bucket", n, 4) || (bforced.len && check_buffer(&bforced, "forced node", n, 4)) ||
        (brank.len && check_buffer(&brank, "node rank", n, 4)) ||
        check_buffer(&ote, "tentative completion", n, 8) || check_buffer(&otp, "tentative payment", n, 8) ||
        check_buffer(&orec, "received", n, 8) || check_buffer(&onode, "node", n, 8))
        goto done;
    k.n = n;
    k.m = m;
    k.nb = nb;
    k.preemptive = preemptive;
    k.immediate = immediate;
    k.all_positive = all_positive;
    k.submit = bsub.buf;
    k.d = bd.buf;
    k.v = bv.buf;
    k.w = bw.buf;
    k.lo = blo.buf;
    k.bucket0 = bbucket.buf;
    k.forced = bforced.len ? bforced.buf : NULL;
    k.rank = brank.len ? brank.buf : NULL;
    k.tent_e = ote.buf;
    k.tent_p = otp.buf;
    k.received = orec.buf;
    k.node_out = onode.buf;
    for (int x = 0; x < nb; x++) {
        if (!(k.lo[x] == k.lo[x]) || (x && !(k.lo[x] < k.lo[x - 1]))) {
            PyErr_SetString(PyExc_ValueError, "_dlgm_kernel.run: bucket lows must decrease strictly");
            goto done;
        }
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        if (k.bucket0[j] < 0 || k.bucket0[j] >= nb || (k.forced && k.forced[j] >= m) ||
            (k.rank && (k.rank[j] < 1 || k.rank[j] > m)) || (j && !(k.submit[j] >= k.submit[j - 1]))) {
            PyErr_Format(PyExc_ValueError, "_dlgm_kernel.run: job row %zd: bucket, forced node, rank or submit "
                         "order out of range", j);
            goto done;
        }
    }
    int fail = 0;
    size_t N = (size_t)n, M = (size_t)m, NB = (size_t)nb;
    k.ratio = zalloc(N, sizeof(double), &fail);
    k.base = zalloc(N, sizeof(double), &fail);
    k.base_lo = zalloc(N, sizeof(double), &fail);
    k.credit = zalloc(N, sizeof(double), &fail);
    k.bucket_of = zalloc(N, sizeof(int32_t), &fail);
    k.mnext = zalloc(N, sizeof(int32_t), &fail);
    k.mprev = zalloc(N, sizeof(int32_t), &fail);
    k.mhead = zalloc(NB, sizeof(int32_t), &fail);
    k.mtail = zalloc(NB, sizeof(int32_t), &fail);
    k.W = zalloc((NB + 1) * 3 * M, sizeof(double), &fail);
    k.R = zalloc((NB + 1) * 3 * M, sizeof(double), &fail);
    k.G = zalloc(M * 2 * (NB + 1), sizeof(double), &fail);
    k.run_v = zalloc(M, sizeof(double), &fail);
    k.run_fin = zalloc(M, sizeof(double), &fail);
    k.qlen = zalloc(M, sizeof(int64_t), &fail);
    k.run_job = zalloc(M, sizeof(int32_t), &fail);
    k.busy = zalloc(M, 1, &fail);
    k.in_idle = zalloc(M, 1, &fail);
    k.queued_idle = zalloc(M, 1, &fail);
    k.to_start_flag = zalloc(M, 1, &fail);
    k.q = zalloc(M, sizeof(int32_t *), &fail);
    k.qsize = zalloc(M, sizeof(Py_ssize_t), &fail);
    k.qcap = zalloc(M, sizeof(Py_ssize_t), &fail);
    k.idle = zalloc(M, sizeof(int32_t), &fail);
    k.to_start = zalloc(M, sizeof(int32_t), &fail);
    k.idle_queued = zalloc(M, sizeof(int32_t), &fail);
    k.A = zalloc(M, sizeof(double), &fail);
    k.B = zalloc(M, sizeof(double), &fail);
    k.cost = zalloc(M, sizeof(double), &fail);
    k.va = zalloc(M, sizeof(double), &fail);
    k.wa = zalloc(M, sizeof(double), &fail);
    k.ra = zalloc(M, 1, &fail);
    k.order = zalloc(M, sizeof(int32_t), &fail);
    if (fail) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t j = 0; j < N; j++) {
        double dj = k.d[j];
        k.ratio[j] = dj > 0 ? k.v[j] / dj : INFINITY;
        k.bucket_of[j] = -1;
        k.tent_e[j] = NAN;
        k.tent_p[j] = NAN;
        k.received[j] = 0.0;
        k.node_out[j] = -1;
    }
    for (size_t b = 0; b < NB; b++) k.mhead[b] = k.mtail[b] = -1;
    for (int x = 0; x < m; x++) {
        k.run_job[x] = -1;
        idle_push(&k, x);
    }
    if (eng_loop(&k.e, &k, NULL, step)) { /* without the GIL */
        PyErr_NoMemory();
        goto done;
    }
    eng_kill_pending(&k.e); /* none: every job completes */
    result = Py_BuildValue("(dnL)", k.e.now, k.preemption_count, (long long)k.e.batches);
done:
    release(&k);
    for (size_t x = 0; x < sizeof(all) / sizeof(all[0]); x++) PyBuffer_Release(all[x]);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(submit, runtime, bid, choice, bucket, lo, forced, rank, nodes, preemptive, immediate, all_positive, "
     "first_start, end_time, preemptions, payment, state, tentative_completion, tentative_payment, received, node)"
     " -> (last event time, preemption count): DLGM / P-DLGM over contiguous float64 / int32 / int64 / int8 "
     "arrays; the records (empty_records) and the other outputs are written in place."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dlgm_kernel",
                                    "DLGM and P-DLGM in C (the reference is marketsched.mechanisms.online.dlgm).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__dlgm_kernel(void) { return PyModule_Create(&module); }
