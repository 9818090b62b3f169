/* The discrete-event engine of marketsched.engine.simulator.Simulator, in C, for the compiled
 * kernels (docs/engine.md, "Compiled kernels"). Each kernel includes this header and writes its
 * rule's step; the loop is the one of Simulator.proceed and the event order of its module
 * docstring: per time stamp t, the completions at t (in job order), the arrivals at t (in submit
 * order), then one decision. Every float operation is the Python engine's, in the same order
 * (finish = now + remaining; remaining = finish - now), so the records are bit for bit equal.
 * Compiled without -ffast-math and with -ffp-contract=off (no fused multiply-add).
 */
#ifndef MARKETSCHED_KERNEL_ENGINE_H
#define MARKETSCHED_KERNEL_ENGINE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_alloc.h"

#define ST_PENDING 0
#define ST_COMPLETED 1
#define ST_KILLED 4

typedef struct {
    double f;   /* predicted completion time */
    int64_t j;  /* job row */
} Completion;

/* One record per job for what a start, a completion or a preemption reads and writes, so that a
 * job taken at random from a long queue costs one cache line, not one per array: its remaining
 * work, its first start (NaN before it; written to the records' column at the end,
 * eng_conclude_job), its place in the completions' heap (at) and a 32-bit field of the policy's
 * (tag). A kernel adds its own per-job fields by defining ENG_JOB_EXTRA before including this
 * header (the priority kernel: the k-th price's marks and payment; the record is then 64 bytes,
 * one cache line, the buffer aligned to one). With the job's fields spread over several arrays,
 * HB on LPC-EGEE at 10 % of the nodes (jobs start and end in priority order, rows at random)
 * paid a cache miss per array per job. */
#ifndef ENG_JOB_EXTRA
#define ENG_JOB_EXTRA
#endif
typedef struct {
    double remaining;
    double first_start;
    uint32_t at;  /* place in the completions' heap plus 1, 0 when not running */
    uint32_t tag; /* the policy's */
    ENG_JOB_EXTRA
} EngJob;

typedef struct {
    Py_ssize_t n;
    int64_t capacity, used;
    double now;
    const double *submit;
    const int64_t *procs;  /* NULL: every job needs 1 processor */
    EngJob *job;
    /* the records (the caller's NumPy columns); first_start is written at the end from job[] */
    double *first_start, *end_time, *payment;
    int64_t *preemptions;
    int8_t *state;
    /* completions: a binary min-heap of (f, j), f = the time the job's work ends, over the running
     * jobs only: job[j].at is job j's place in it plus 1, 0 when j is not running (eng_running). A
     * preempted job's entry is taken out at once; the Python engine's finish_at[j] is the entry's
     * f. */
    Completion *comps;
    Py_ssize_t ncomps, capcomps;
    /* the completions of the current batch, in job order */
    int64_t *completed;
    Py_ssize_t ncompleted, capcompleted;
    Py_ssize_t next_arrival;
    int64_t batches;
} Engine;

static inline int comp_lt(const Completion *a, const Completion *b)
{
    return a->f < b->f || (a->f == b->f && a->j < b->j);
}

/* put x at place k of the heap, moving it up while it beats its parent (sift up) */
static inline void comps_up(Engine *e, Py_ssize_t k, Completion x)
{
    Completion *h = e->comps;
    while (k > 0) {
        Py_ssize_t p = (k - 1) / 2;
        if (!comp_lt(&x, &h[p])) break;
        h[k] = h[p];
        e->job[h[k].j].at = (uint32_t)(k + 1);
        k = p;
    }
    h[k] = x;
    e->job[x.j].at = (uint32_t)(k + 1);
}

/* put x at place k of the heap of m entries, moving it down while a child beats it (sift down) */
static inline void comps_down(Engine *e, Py_ssize_t k, Py_ssize_t m, Completion x)
{
    Completion *h = e->comps;
    for (;;) {
        Py_ssize_t c = 2 * k + 1;
        if (c >= m) break;
        if (c + 1 < m && comp_lt(&h[c + 1], &h[c])) c++;
        if (!comp_lt(&h[c], &x)) break;
        h[k] = h[c];
        e->job[h[k].j].at = (uint32_t)(k + 1);
        k = c;
    }
    h[k] = x;
    e->job[x.j].at = (uint32_t)(k + 1);
}

static int comps_push(Engine *e, double f, int64_t j)
{
    if (e->ncomps == e->capcomps) {
        Py_ssize_t cap = e->capcomps ? 2 * e->capcomps : 64;
        Completion *c = realloc(e->comps, (size_t)cap * sizeof(Completion));
        if (!c) return -1;
        e->comps = c;
        e->capcomps = cap;
    }
    Completion x = {f, j};
    comps_up(e, e->ncomps++, x);
    return 0;
}

/* take out the entry at place k (its job's at[] becomes 0) */
static void comps_remove(Engine *e, Py_ssize_t k)
{
    Completion *h = e->comps;
    e->job[h[k].j].at = 0;
    Py_ssize_t m = --e->ncomps;
    if (k == m) return;
    Completion x = h[m]; /* the last entry fills the hole, then moves up or down */
    if (k > 0 && comp_lt(&x, &h[(k - 1) / 2])) comps_up(e, k, x);
    else comps_down(e, k, m, x);
}

static inline int eng_running(const Engine *e, int64_t j) { return e->job[j].at != 0; }

static inline int64_t eng_procs(const Engine *e, int64_t j)
{
    return e->procs ? e->procs[j] : 1;
}

/* ClusterState.start + Simulator._started */
static int eng_start(Engine *e, int64_t j)
{
    EngJob *r = &e->job[j];
    e->used += eng_procs(e, j);
    if (r->first_start != r->first_start) r->first_start = e->now;
    return comps_push(e, e->now + r->remaining, j); /* finish_at[j] */
}

/* ClusterState.preempt + Simulator._stopped */
static void eng_preempt(Engine *e, int64_t j)
{
    e->used -= eng_procs(e, j);
    EngJob *r = &e->job[j];
    if (r->at) { /* running: finish_at[j] is its entry's f */
        Py_ssize_t k = (Py_ssize_t)r->at - 1;
        double f = e->comps[k].f;
        comps_remove(e, k);
        if (f != INFINITY) r->remaining = f - e->now;
    }
    e->preemptions[j] += 1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The time of the next batch (INFINITY: none). */
static double eng_next_time(const Engine *e)
{
    double t = e->next_arrival < e->n ? e->submit[e->next_arrival] : INFINITY;
    if (e->ncomps && e->comps[0].f < t) t = e->comps[0].f;
    return t;
}

/* Complete every running job whose work ends by t (e->completed, in job order). */
static int eng_complete_due(Engine *e, double t)
{
    e->ncompleted = 0;
    while (e->ncomps && e->comps[0].f <= t) {
        int64_t j = e->comps[0].j; /* a running job: the heap holds no other */
        comps_remove(e, 0);
        e->used -= eng_procs(e, j);
        e->job[j].remaining = 0.0;
        e->state[j] = ST_COMPLETED;
        e->end_time[j] = t;
        if (e->ncompleted == e->capcompleted) {
            Py_ssize_t cap = e->capcompleted ? 2 * e->capcompleted : 64;
            int64_t *p = realloc(e->completed, (size_t)cap * sizeof(int64_t));
            if (!p) return -1;
            e->completed = p;
            e->capcompleted = cap;
        }
        e->completed[e->ncompleted++] = j;
    }
    if (e->ncompleted > 1) qsort(e->completed, (size_t)e->ncompleted, sizeof(int64_t), cmp_i64);
    return 0;
}

/* The rows arriving at t: [*first, e->next_arrival). */
static void eng_arrivals(Engine *e, double t, Py_ssize_t *first)
{
    Py_ssize_t i = e->next_arrival;
    *first = i;
    while (i < e->n && e->submit[i] <= t) i++;
    e->next_arrival = i;
}

/* Simulator.proceed over the whole workload: per batch at time t, the policy's advance(t) (may be
 * NULL), the completions at t, the arrivals at t, then its step over the rows [first, last).
 * Runs without the GIL (it touches no Python object); -1 when an allocation failed. */
typedef void (*AdvanceFn)(void *policy, double t);
typedef int (*StepFn)(void *policy, double t, Py_ssize_t first, Py_ssize_t last);

static int eng_loop(Engine *e, void *policy, AdvanceFn advance, StepFn step)
{
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        double t = eng_next_time(e);
        if (t == INFINITY) break;
        e->now = t;
        if (advance) advance(policy, t);
        if (eng_complete_due(e, t) < 0) { failed = 1; break; }
        Py_ssize_t first;
        eng_arrivals(e, t, &first);
        if (step(policy, t, first, e->next_arrival) < 0) { failed = 1; break; }
        e->batches++;
    }
    Py_END_ALLOW_THREADS
    return failed ? -1 : 0;
}

/* Simulator.conclude's last step for job j: still open, it is KILLED at the end time; then its
 * first start goes to the records' column. */
static inline void eng_conclude_job(Engine *e, Py_ssize_t j)
{
    if (e->state[j] == ST_PENDING) {
        if (eng_running(e, j)) {
            e->job[j].at = 0;
            e->used -= eng_procs(e, j);
        }
        e->state[j] = ST_KILLED;
        e->end_time[j] = e->now;
    }
    e->first_start[j] = e->job[j].first_start;
}

/* eng_conclude_job for every job */
static void eng_kill_pending(Engine *e)
{
    for (Py_ssize_t j = 0; j < e->n; j++) eng_conclude_job(e, j);
}

/* A contiguous buffer of n items of the given size, or -1 with a ValueError naming it. */
static int check_buffer(Py_buffer *b, const char *name, Py_ssize_t n, Py_ssize_t itemsize)
{
    if (b->len != n * itemsize) {
        PyErr_Format(PyExc_ValueError, "compiled kernel: column %s has %zd bytes, expected %zd (%zd items of %zd)",
                     name, b->len, n * itemsize, n, itemsize);
        return -1;
    }
    return 0;
}

/* Check the columns (n jobs: submit's length; procs NULL: serial jobs), take the records' five
 * columns (first_start, end_time, preemptions, payment, state: the caller's NumPy arrays, filled
 * in place) and allocate the engine's own; -1 with an exception set. */
static int eng_init(Engine *e, int64_t capacity, Py_buffer *submit, Py_buffer *runtime, Py_buffer *procs,
                    Py_buffer *records[5])
{
    memset(e, 0, sizeof(*e));
    Py_ssize_t n = submit->len / (Py_ssize_t)sizeof(double);
    if (check_buffer(submit, "submit", n, 8) || check_buffer(runtime, "runtime", n, 8) ||
        (procs && check_buffer(procs, "procs", n, 8)) || check_buffer(records[0], "first_start", n, 8) ||
        check_buffer(records[1], "end_time", n, 8) || check_buffer(records[2], "preemptions", n, 8) ||
        check_buffer(records[3], "payment", n, 8) || check_buffer(records[4], "state", n, 1))
        return -1;
    if (capacity < 1) {
        PyErr_Format(PyExc_ValueError, "compiled kernel: capacity %lld", (long long)capacity);
        return -1;
    }
    if ((uint64_t)n >= UINT32_MAX) { /* places in the completions' heap, plus 1, are 32 bits */
        PyErr_Format(PyExc_ValueError, "compiled kernel: %zd jobs, at most %u", n, UINT32_MAX - 1);
        return -1;
    }
    e->n = n;
    e->capacity = capacity;
    e->submit = submit->buf;
    e->procs = procs ? procs->buf : NULL;
    e->first_start = records[0]->buf;
    e->end_time = records[1]->buf;
    e->preemptions = records[2]->buf;
    e->payment = records[3]->buf;
    e->state = records[4]->buf;
    size_t m = n ? (size_t)n : 1;
    e->job = big_alloc(m * sizeof(EngJob)); /* aligned to a cache line at least */
    if (!e->job) {
        PyErr_NoMemory();
        return -1;
    }
    const double *runtime_of = runtime->buf, *start_of = e->first_start;
    for (Py_ssize_t j = 0; j < n; j++) {
        EngJob *r = &e->job[j];
        memset(r, 0, sizeof(*r));
        r->remaining = runtime_of[j];
        r->first_start = start_of[j];
    }
    return 0;
}

static void eng_free(Engine *e)
{
    free(e->job);
    free(e->comps);
    free(e->completed);
}

#endif
