/* Compiled kernel of marketsched.mechanisms.online.priority.PriorityScheduler (HB, NPHB, WSPT,
 * WSEPT on serial jobs) with the payment schemes of marketsched.mechanisms.online.pricing
 * (FirstPrice, KthPrice, KthPriceUncapped, and first and k-th side by side as
 * marketsched.experiments.runner.BothPrices):
 * Shudler et al. (2010), Algorithm 1 and sections III.B, IV and V. The Python classes are the
 * reference; this file mirrors them step by step (the same heaps' orders, the same float
 * operations in the same order), and the tests compare both paths' records bit for bit.
 *
 * The queue and HB's running set: the Python reference keeps heaps of (-key, row) and (key, -row).
 * Keys are fixed for a whole run, so here the rows are ranked once in the order (-key, row) and
 * both are sets of ranks (kernel_rankset.h): the best queued job is the smallest rank in the
 * queue, the worst running job the largest rank among the running ones (the order (key, -row)
 * is the reverse), the same jobs the heaps give, at a cost that does not grow with the queue.
 */
#include "kernel_sumtree.h"
/* KthPrice's marks of a job (the reading of E and the leaf count of K when it last started), its
 * cost (read with the marks) and its k-th payment, in the engine's record of the job (one cache
 * line with the job's remaining work, first start, place in the completions' heap and rank in
 * the tag): a job started or stopped at random from a long queue costs one line. */
#define ENG_JOB_EXTRA \
    TimeSum kE;       \
    int64_t kK;       \
    double kcost;     \
    double kpay;
#include "kernel_rankset.h"
#include "kernel_sorted.h"

_Static_assert(sizeof(EngJob) == 64, "a job's engine record is one cache line");

#define SCHEME_FIRST 1
#define SCHEME_KTH 2
/* with SCHEME_KTH alone: caps not tracked, KthPriceUncapped under WSPT and WSEPT (its bind sets
 * track_caps only for NPHB; everything else is KthPrice's) */
#define SCHEME_UNTRACKED 4

typedef struct {
    Engine e;
    const double *bid, *key, *cost;
    int preemptive;
    int schemes; /* SCHEME_FIRST | SCHEME_KTH */
    double *kth_payment; /* where the k-th price's payments go at the end (the records' payment when alone) */
    double *full, *ran;  /* first price, optional: each job's run time while saturated, and in all */
    /* rank[j] (the tag of job j's engine record from the start of the run on; freed then): place of row j
     * in the order (-key, row); order[r]: the row of rank r; key_of[r]: its key (the queue's best
     * key is read at every batch: one read by rank, not two) */
    uint32_t *rank, *order;
    double *key_of;
    RankSet waiting; /* the queue's ranks */
    Py_ssize_t nwaiting;
    RankSet rset; /* HB: the running jobs' ranks */
    /* FirstPrice: time saturated (S) or not (U); marks are their readings (hi, lo) */
    TimeSum S, U;
    double f_last;
    int saturated;
    TimeSum *mark_S, *mark_U;
    /* KthPrice: k* dt per interval (K; marks are leaf counts) and time with an empty queue (E) */
    SumTree K;
    TimeSum E;
    double k_last;
    int has_kstar;
    double kstar;
    double b0; /* boundary (b0, b1): (-key, row) of the best queued job, (inf, 0) when none */
    int64_t b1;
    int track_caps;
    double *k_mark_t;
    char *capped;
    SortedPairs rprios; /* (-key, row) of the running jobs, sorted (non-preemptive) */
} Prio;

/* tuple order of (x0, x1) < (y0, y1) */
static inline int tup_lt(double x0, int64_t x1, double y0, int64_t y1)
{
    return x0 < y0 || (x0 == y0 && x1 < y1);
}

static inline void waiting_push(Prio *p, int64_t j)
{
    rs_insert(&p->waiting, p->e.job[j].tag);
    p->nwaiting++;
}

/* the rank of the best queued job (the queue is not empty) */
static inline uint64_t waiting_top(const Prio *p) { return rs_min(&p->waiting); }

/* take the best queued job out of the queue: its rank */
static inline uint64_t waiting_pop(Prio *p)
{
    uint64_t r = rs_min(&p->waiting);
    rs_erase(&p->waiting, r);
    p->nwaiting--;
    return r;
}

/* ------------------------------------------------------------------ payment schemes */
static void advance(Prio *p, double t)
{
    if (p->schemes & SCHEME_FIRST) { /* FirstPrice.advance */
        double dt = t - p->f_last;
        if (dt != 0.0) ts_add(p->saturated ? &p->S : &p->U, dt);
        p->f_last = t;
    }
    if (p->schemes & SCHEME_KTH) { /* KthPrice.advance */
        double dt = t - p->k_last;
        if (dt != 0.0) {
            if (!p->has_kstar) ts_add(&p->E, dt);
            else if (p->kstar != INFINITY) st_add(&p->K, p->kstar * dt);
        }
        p->k_last = t;
    }
}

static inline void kth_mark(Prio *p, int64_t j)
{
    EngJob *r = &p->e.job[j];
    r->kK = st_mark(&p->K);
    r->kE = p->E;
    if (p->track_caps) p->k_mark_t[j] = p->k_last; /* read only for a capped job: none under HB */
}

/* KthPrice._settle (and _open) */
static inline void kth_settle(Prio *p, int64_t j)
{
    EngJob *r = &p->e.job[j];
    if (p->track_caps && p->capped[j]) { /* no job is capped where caps are not tracked (HB) */
        r->kpay += p->bid[j] * (p->k_last - p->k_mark_t[j]);
    } else {
        double k = st_since(&p->K, r->kK);
        r->kpay += r->kcost * k + 1.0 * ts_since(&p->E, r->kE.hi, r->kE.lo);
    }
}

static int on_start(Prio *p, int64_t j)
{
    if (p->schemes & SCHEME_FIRST) {
        p->mark_S[j] = p->S;
        p->mark_U[j] = p->U;
    }
    if (p->schemes & SCHEME_KTH) {
        kth_mark(p, j);
        if (p->track_caps) {
            double x0 = -p->key[j];
            if (sp_insert(&p->rprios, x0, j) < 0) return -1; /* insort(running_prios, (-key, row)) */
            p->capped[j] = tup_lt(p->b0, p->b1, x0, j);
        }
    }
    return 0;
}

static void on_stop(Prio *p, int64_t j)
{
    if (p->schemes & SCHEME_FIRST) {
        double s = ts_since(&p->S, p->mark_S[j].hi, p->mark_S[j].lo), u = ts_since(&p->U, p->mark_U[j].hi, p->mark_U[j].lo);
        if (p->full) { /* FirstPriceSaturation.on_stop, before FirstPrice's */
            p->full[j] += s;
            p->ran[j] += s + u;
        }
        p->e.payment[j] += p->bid[j] * s + 1.0 * u;
    }
    if (p->schemes & SCHEME_KTH) {
        kth_settle(p, j);
        if (p->track_caps) {
            sp_delete(&p->rprios, -p->key[j], j); /* present: j was running */
            p->capped[j] = 0;
        }
    }
}

static void update(Prio *p)
{
    if (p->schemes & SCHEME_FIRST) /* FirstPrice.update: active = running + queued */
        p->saturated = p->e.used + p->nwaiting >= p->e.capacity;
    if (p->schemes & SCHEME_KTH) {
        double n0;
        int64_t n1;
        if (p->nwaiting == 0) {
            p->has_kstar = 0;
            n0 = INFINITY;
            n1 = 0;
        } else {
            uint64_t top = waiting_top(p);
            n0 = -p->key_of[top];
            n1 = p->track_caps ? p->order[top] : 0; /* read only where caps are tracked */
            p->has_kstar = 1;
            p->kstar = -n0;
        }
        if (p->track_caps && !(n0 == p->b0 && n1 == p->b1)) {
            int become_capped = tup_lt(n0, n1, p->b0, p->b1);
            double lo0 = become_capped ? n0 : p->b0, hi0 = become_capped ? p->b0 : n0;
            int64_t lo1 = become_capped ? n1 : p->b1, hi1 = become_capped ? p->b1 : n1;
            const SortedPairs *rp = &p->rprios;
            SpPos b = sp_bisect_right(rp, hi0, hi1);
            for (SpPos at = sp_bisect_right(rp, lo0, lo1); !sp_pos_eq(at, b); at = sp_next(rp, at)) {
                int64_t j = sp_at(rp, at)->j;
                if (p->capped[j] != become_capped) {
                    kth_settle(p, j);
                    kth_mark(p, j);
                    p->capped[j] = (char)become_capped;
                }
            }
        }
        p->b0 = n0;
        p->b1 = n1;
    }
}

/* ------------------------------------------------------------------ PriorityScheduler.step */
static int step(Prio *p, Py_ssize_t first, Py_ssize_t last)
{
    Engine *e = &p->e;
    if (p->K.full) return -1;
    for (Py_ssize_t c = 0; c < e->ncompleted; c++) {
        on_stop(p, e->completed[c]);
        if (p->preemptive) rs_erase(&p->rset, e->job[e->completed[c]].tag);
    }
    for (Py_ssize_t j = first; j < last; j++) waiting_push(p, j);
    int64_t free = e->capacity - e->used;
    while (free && p->nwaiting) {
        uint64_t r = waiting_pop(p);
        int64_t j = p->order[r];
        if (eng_start(e, j) < 0) return -1;
        if (on_start(p, j) < 0) return -1;
        if (p->preemptive) rs_insert(&p->rset, r);
        free--;
    }
    if (p->preemptive) {
        while (p->nwaiting && !rs_empty(&p->rset)) {
            uint64_t out_rank = rs_max(&p->rset);
            if (rs_min(&p->waiting) >= out_rank) break;
            /* the best queued job beats the worst running one: swap them */
            int64_t out = p->order[out_rank];
            rs_erase(&p->rset, out_rank);
            eng_preempt(e, out);
            on_stop(p, out);
            uint64_t in_rank = waiting_pop(p);
            int64_t in = p->order[in_rank];
            if (eng_start(e, in) < 0) return -1;
            if (on_start(p, in) < 0) return -1;
            rs_insert(&p->rset, in_rank);
            rs_insert(&p->waiting, out_rank); /* waiting_push(out) */
            p->nwaiting++;
        }
    }
    update(p);
    if (p->nwaiting) /* the job that starts next, whenever it is: its record read ahead, while the
                      * engine moves on to the next batch (with a long queue it is a row at random) */
        __builtin_prefetch(&e->job[p->order[waiting_top(p)]], 1);
    return 0;
}

static void advance_cb(void *p, double t) { advance(p, t); }

static int step_cb(void *p, double t, Py_ssize_t first, Py_ssize_t last)
{
    (void)t;
    return step(p, first, last);
}

static void prio_free(Prio *p)
{
    eng_free(&p->e);
    free(p->rank);
    free(p->order);
    free(p->key_of);
    rs_free(&p->waiting);
    rs_free(&p->rset);
    free(p->mark_S);
    free(p->mark_U);
    st_free(&p->K);
    free(p->k_mark_t);
    free(p->capped);
    sp_free(&p->rprios);
}

static PyObject *run(PyObject *self, PyObject *args)
{
    Py_buffer submit, runtime, bid, key, cost, first_start, end_time, preemptions, payment, state, kth_payment, full, ran;
    long long capacity;
    int preemptive, schemes;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*Lpiw*w*w*w*w*w*w*w*", &submit, &runtime, &bid, &key, &cost, &capacity,
                          &preemptive, &schemes, &first_start, &end_time, &preemptions, &payment, &state,
                          &kth_payment, &full, &ran))
        return NULL;
    Py_buffer *bufs[] = {&submit, &runtime, &bid, &key, &cost, &first_start, &end_time, &preemptions, &payment,
                         &state, &kth_payment, &full, &ran};
    PyObject *result = NULL;
    Prio p;
    memset(&p, 0, sizeof(p));
    Py_buffer *records[5] = {&first_start, &end_time, &preemptions, &payment, &state};
    int untracked = (schemes & SCHEME_UNTRACKED) != 0;
    schemes &= ~SCHEME_UNTRACKED;
    if (eng_init(&p.e, (int64_t)capacity, &submit, &runtime, NULL, records) < 0) goto done;
    Engine *e = &p.e;
    Py_ssize_t n = e->n;
    if (check_buffer(&bid, "bid", n, 8) || check_buffer(&key, "key", n, 8) || check_buffer(&cost, "cost", n, 8) ||
        (schemes == (SCHEME_FIRST | SCHEME_KTH) && check_buffer(&kth_payment, "kth_payment", n, 8)))
        goto done;
    if (full.len || ran.len) { /* the saturation times: first price alone */
        if (check_buffer(&full, "full", n, 8) || check_buffer(&ran, "ran", n, 8)) goto done;
        if (schemes != SCHEME_FIRST || untracked) {
            PyErr_SetString(PyExc_ValueError, "compiled priority kernel: saturation times with first price alone");
            goto done;
        }
        p.full = full.buf;
        p.ran = ran.buf;
    }
    if (schemes < 1 || schemes > 3 || (untracked && schemes != SCHEME_KTH)) {
        PyErr_Format(PyExc_ValueError, "compiled priority kernel: schemes %d (1 first, 2 k-th, 3 both; 4 + 2: k-th "
                     "without caps)", schemes | (untracked ? SCHEME_UNTRACKED : 0));
        goto done;
    }
    p.bid = bid.buf;
    p.key = key.buf;
    p.cost = cost.buf;
    p.preemptive = preemptive;
    p.schemes = schemes;
    p.kth_payment = schemes == SCHEME_KTH ? e->payment : (double *)kth_payment.buf;
    size_t m = n ? (size_t)n : 1;
    if ((uint64_t)n > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "compiled priority kernel: %zd jobs, at most %u", n, UINT32_MAX);
        goto done;
    }
    p.rank = malloc(m * sizeof(uint32_t));
    p.order = malloc(m * sizeof(uint32_t));
    p.key_of = malloc(m * sizeof(double));
    if (!p.rank || !p.order || !p.key_of || rank_rows(p.key, -1.0, n, p.order, p.rank, p.key_of) < 0) goto nomem;
    if (rs_init(&p.waiting, n) < 0 || (preemptive && rs_init(&p.rset, n) < 0)) goto nomem;
    if (schemes & SCHEME_FIRST) {
        p.mark_S = calloc(m, sizeof(TimeSum));
        p.mark_U = calloc(m, sizeof(TimeSum));
        if (!p.mark_S || !p.mark_U) goto nomem;
    }
    if (schemes & SCHEME_KTH) {
        /* K gets at most one leaf per batch with time passing (the advance before it), and a batch has
         * an arrival or a completion: 2 n + 1 at most */
        if (st_init(&p.K, 2 * (int64_t)n + 2) < 0) goto nomem;
        p.k_mark_t = calloc(m, sizeof(double));
        p.capped = calloc(m, 1);
        if (!p.k_mark_t || !p.capped) goto nomem;
        p.track_caps = !preemptive && !untracked;
        p.b0 = INFINITY;
        p.b1 = 0;
    }
    /* the job records' policy fields, in one pass: the rank (the run reads the tags), and the k-th
     * price's cost and payment so far (its marks are set at each start before any read) */
    for (Py_ssize_t j = 0; j < n; j++) {
        EngJob *r = &e->job[j];
        r->tag = p.rank[j];
        if (schemes & SCHEME_KTH) {
            r->kcost = p.cost[j];
            r->kpay = p.kth_payment[j];
        }
    }
    free(p.rank);
    p.rank = NULL;
    if (eng_loop(e, &p, advance_cb, step_cb) < 0) goto nomem;
    /* Simulator.conclude: advance to the end, the policy's close (settle running jobs), kill the rest;
     * one pass over the jobs (a job's settling touches its own payment and marks only, so settling
     * each running job just before its record is written gives the same records as settling all
     * first) */
    advance(&p, e->now);
    for (Py_ssize_t j = 0; j < n; j++) {
        if (eng_running(e, j)) on_stop(&p, j);
        eng_conclude_job(e, j);
        if (schemes & SCHEME_KTH) p.kth_payment[j] = e->job[j].kpay;
    }
    if (p.K.full) goto nomem;
    result = Py_BuildValue("(dL)", e->now, (long long)e->batches);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    prio_free(&p);
    for (size_t b = 0; b < sizeof(bufs) / sizeof(bufs[0]); b++) PyBuffer_Release(bufs[b]);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(submit, runtime, bid, key, cost, capacity, preemptive, schemes, first_start, end_time, preemptions, "
     "payment, state, kth_payment) -> (end time, batches): the whole simulation; schemes 1 first price, 2 k-th "
     "price, 3 both (the k-th price's payments in kth_payment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_priority",
                                    "Compiled kernel of the priority rules (HB, NPHB, WSPT, WSEPT).", -1, methods};

PyMODINIT_FUNC PyInit__priority(void) { return PyModule_Create(&module); }
