/* Compiled kernel of marketsched.mechanisms.online.backfilling.Backfilling: FCFS and EASY
 * backfilling on parallel jobs (Lifka 1995; Mu'alem & Feitelson 2001), with the decisions of
 * docs/engine.md ("Conformance"). The Python class is the reference; this file mirrors its step
 * (the queue in submission order, running jobs sorted by (estimated end, row), the shadow time
 * and extra processors of the queue head, one backfill scan per pass; FCFS keeps no sorted ends,
 * as it never reads them), and the tests compare both
 * paths' records bit for bit (and tests/reference_easy.py's start times).
 */
#include "kernel_sorted.h"

typedef struct {
    Engine eng;
    int backfill;
    const double *est;
    double *est_end;
    int64_t *queue; /* rows in submission order: queue[qh..qt) */
    Py_ssize_t qh, qt;
    SortedPairs ends; /* running jobs: (estimated end, row), sorted */
} Bf;

/* Backfilling._start; FCFS (backfill off) never reads the estimated ends, so it keeps none */
static int bf_start(Bf *b, int64_t j, double t)
{
    if (eng_start(&b->eng, j) < 0) return -1;
    if (!b->backfill) return 0;
    double e = t + b->est[j];
    b->est_end[j] = e;
    return sp_insert(&b->ends, e, j); /* insort((e, j)) */
}

/* Backfilling.step */
static int step(Bf *b, double t, Py_ssize_t first, Py_ssize_t last)
{
    Engine *eng = &b->eng;
    const int64_t *procs = eng->procs;
    for (Py_ssize_t c = 0; b->backfill && c < eng->ncompleted; c++) {
        int64_t j = eng->completed[c];
        if (sp_delete(&b->ends, b->est_end[j], j) < 0) { /* del ends[bisect_left(ends, (e, j))] */
            PyErr_Format(PyExc_RuntimeError, "compiled EASY: job row %lld is not among the running jobs", (long long)j);
            return -1;
        }
    }
    for (Py_ssize_t j = first; j < last; j++) b->queue[b->qt++] = j;
    int64_t free = eng->capacity - eng->used;
    while (b->qh < b->qt && procs[b->queue[b->qh]] <= free) {
        int64_t j = b->queue[b->qh++];
        if (bf_start(b, j, t) < 0) return -1;
        free -= procs[j];
    }
    if (!b->backfill || b->qt - b->qh < 2 || free == 0) return 0;
    /* shadow time of the head: walk the running jobs by estimated end until the head fits ... */
    int64_t need = procs[b->queue[b->qh]];
    int64_t avail = free;
    const SortedPairs *ends = &b->ends;
    SpPos k = sp_begin(ends);
    double shadow = t;
    while (avail < need) {
        const Pair *r = sp_at(ends, k);
        avail += procs[r->j];
        shadow = r->k;
        k = sp_next(ends, k);
    }
    if (shadow < t) shadow = t;
    /* ... and the extra processors: every running job expected to end by the shadow time */
    while (!sp_done(ends, k) && sp_at(ends, k)->k <= shadow) {
        avail += procs[sp_at(ends, k)->j];
        k = sp_next(ends, k);
    }
    int64_t extra = avail - need;
    /* every queued job is a candidate, in submission order; the started ones leave the queue */
    Py_ssize_t w = b->qh + 1, r = b->qh + 1;
    for (; r < b->qt; r++) {
        int64_t j = b->queue[r];
        int64_t p = procs[j];
        int start = 1;
        if (p > free) start = 0;
        else if (t + b->est[j] > shadow) { /* still running at the shadow time: only on extra processors */
            if (p > extra) start = 0;
            else extra -= p;
        }
        if (start) {
            if (bf_start(b, j, t) < 0) return -1;
            free -= p;
            if (free == 0) {
                r++;
                break;
            }
        } else {
            b->queue[w++] = j;
        }
    }
    if (w < r) {
        memmove(b->queue + w, b->queue + r, (size_t)(b->qt - r) * sizeof(int64_t));
        b->qt -= r - w;
    }
    return 0;
}

static int step_cb(void *b, double t, Py_ssize_t first, Py_ssize_t last) { return step(b, t, first, last); }

static PyObject *run(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer submit, runtime, procs, est, first_start, end_time, preemptions, payment, state;
    long long capacity;
    int backfill;
    if (!PyArg_ParseTuple(args, "y*y*y*y*Lpw*w*w*w*w*", &submit, &runtime, &procs, &est, &capacity, &backfill,
                          &first_start, &end_time, &preemptions, &payment, &state))
        return NULL;
    Py_buffer *bufs[] = {&submit, &runtime, &procs, &est, &first_start, &end_time, &preemptions, &payment, &state};
    PyObject *result = NULL;
    Bf b;
    memset(&b, 0, sizeof(b));
    Py_buffer *records[5] = {&first_start, &end_time, &preemptions, &payment, &state};
    if (eng_init(&b.eng, (int64_t)capacity, &submit, &runtime, &procs, records) < 0) goto done;
    Engine *eng = &b.eng;
    Py_ssize_t n = eng->n;
    if (check_buffer(&est, "est", n, 8)) goto done;
    b.backfill = backfill;
    b.est = est.buf;
    size_t m = n ? (size_t)n : 1;
    b.est_end = calloc(m, sizeof(double));
    b.queue = malloc(m * sizeof(int64_t));
    if (!b.est_end || !b.queue) goto nomem;
    if (eng_loop(eng, &b, NULL, step_cb) < 0) goto nomem;
    eng_kill_pending(eng);
    result = Py_BuildValue("(dL)", eng->now, (long long)eng->batches);
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    eng_free(&b.eng);
    free(b.est_end);
    free(b.queue);
    sp_free(&b.ends);
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) PyBuffer_Release(bufs[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(submit, runtime, procs, est, capacity, backfill, first_start, end_time, preemptions, payment, state) -> "
     "(end time, batches): the whole simulation of FCFS (backfill False) or EASY (True)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_backfilling",
                                    "Compiled kernel of FCFS and EASY backfilling.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__backfilling(void) { return PyModule_Create(&module); }
