/* Exact critical values of GREEDEX (Stößer 2009, section 3.4.3) in C.
 *
 * Python reference: marketsched.mechanisms.clearing.greedex.critical_values (its Python path,
 * _scan_batch); read its docstring for the definition and the method. This file runs the same
 * scans, one job at a time instead of in lockstep, with the same operations in the same order,
 * so every critical value is the reference's bit for bit (only comparisons and the subtraction of
 * a job's demand, which is exact on integer-valued float64 capacities):
 *
 *   1. the full run's capacity state is advanced rank by rank by replaying the allocation's own
 *      placements; a scanned job's run starts from it at the job's fork rank (its own rank for a
 *      winner, the top for a loser), works on it in place and undoes its changes at the end (so
 *      a run costs what it does, not a copy of slots x nodes);
 *   2. the run places every other job of the ranking from there, by Algorithm 1 (first node in
 *      ranking order with room in each slot among the nodes the job can afford; all slots or none);
 *   3. at each boundary between two distinct values u > lo, q = max over the job's slots of the
 *      reserve of the cheapest node with room for it; when q < u the candidate max(q, lo) may
 *      lower the best; the scan stops once q >= best.
 *
 * What makes it fast is the first-fit search: each slot keeps, per block of BLOCK nodes, the
 * largest CPU and memory left in the block, and the search skips a block in which no node has
 * enough of either (exact: a node that fits makes both block maxima large enough).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 32

typedef struct {
    Py_ssize_t T, N, NB;
    double *cpu, *mem;   /* T x N capacity left (-inf outside a node's window) */
    double *bcpu, *bmem; /* T x NB block maxima */
} State;

static int state_alloc(State *s, Py_ssize_t T, Py_ssize_t N) {
    s->T = T;
    s->N = N;
    s->NB = (N + BLOCK - 1) / BLOCK;
    s->cpu = malloc(sizeof(double) * (size_t)(T * N + 1));
    s->mem = malloc(sizeof(double) * (size_t)(T * N + 1));
    s->bcpu = malloc(sizeof(double) * (size_t)(T * s->NB + 1));
    s->bmem = malloc(sizeof(double) * (size_t)(T * s->NB + 1));
    return s->cpu && s->mem && s->bcpu && s->bmem ? 0 : -1;
}

static void state_free(State *s) {
    free(s->cpu);
    free(s->mem);
    free(s->bcpu);
    free(s->bmem);
}

static void block_update(State *s, Py_ssize_t t, Py_ssize_t b) {
    Py_ssize_t lo = b * BLOCK, hi = lo + BLOCK < s->N ? lo + BLOCK : s->N;
    const double *c = s->cpu + t * s->N, *m = s->mem + t * s->N;
    double mc = -INFINITY, mm = -INFINITY;
    for (Py_ssize_t n = lo; n < hi; n++) {
        if (c[n] > mc) mc = c[n];
        if (m[n] > mm) mm = m[n];
    }
    s->bcpu[t * s->NB + b] = mc;
    s->bmem[t * s->NB + b] = mm;
}

/* The first node n < K with cpu >= c and mem >= m in slot t, or -1. */
static Py_ssize_t first_fit(const State *s, Py_ssize_t t, double c, double m, Py_ssize_t K) {
    const double *cp = s->cpu + t * s->N, *mp = s->mem + t * s->N;
    const double *bc = s->bcpu + t * s->NB, *bm = s->bmem + t * s->NB;
    Py_ssize_t nb = (K + BLOCK - 1) / BLOCK;
    for (Py_ssize_t b = 0; b < nb; b++) {
        if (!(bc[b] >= c && bm[b] >= m)) continue;
        Py_ssize_t hi = (b + 1) * BLOCK < K ? (b + 1) * BLOCK : K;
        for (Py_ssize_t n = b * BLOCK; n < hi; n++)
            if (cp[n] >= c && mp[n] >= m) return n;
    }
    return -1;
}

static void commit(State *s, Py_ssize_t t, Py_ssize_t n, double c, double m) {
    s->cpu[t * s->N + n] -= c;
    s->mem[t * s->N + n] -= m;
    block_update(s, t, n / BLOCK);
}

typedef struct {
    Py_ssize_t n_jobs, R, A;
    const int64_t *release, *end, *K, *ranking, *assign, *jobs, *fork_at;
    const double *cpu, *mem, *value, *reserve, *top;
    double *best;
    int64_t *first; /* scratch: one node per slot */
} Input;

/* q: the largest over job j's slots of the reserve of the cheapest node with room for it. */
static double threshold(const Input *in, const State *s, Py_ssize_t j) {
    double q = -INFINITY;
    for (Py_ssize_t t = in->release[j]; t <= in->end[j]; t++) {
        Py_ssize_t n = first_fit(s, t, in->cpu[j], in->mem[j], s->N);
        double r = n < 0 ? INFINITY : in->reserve[n];
        if (r > q) q = r;
    }
    return q;
}

/* The reference's evaluate(u, lo) for one run; returns 1 when the scan is done. */
static int evaluate(const Input *in, const State *s, Py_ssize_t a, double u, double lo) {
    Py_ssize_t j = in->jobs[a];
    if (!(in->top[a] >= u)) return 0;
    double q = threshold(in, s, j);
    if (q < u) {
        double cand = q > lo ? q : lo;
        if (cand < in->best[a]) in->best[a] = cand;
    }
    return q >= in->best[a];
}

/* The changes a run made to the full state, undone when it ends (a copy of the whole state per
 * run would cost slots x nodes, and a book's horizon may be hundreds of slots). */
typedef struct {
    Py_ssize_t size, cap;
    int64_t *t, *n;
    double *c, *m;
} Undo;

static int undo_push(Undo *u, Py_ssize_t t, Py_ssize_t n, double c, double m) {
    if (u->size == u->cap) {
        Py_ssize_t cap = u->cap ? 2 * u->cap : 1024;
        int64_t *nt = realloc(u->t, sizeof(int64_t) * (size_t)cap);
        if (nt) u->t = nt;
        int64_t *nn = realloc(u->n, sizeof(int64_t) * (size_t)cap);
        if (nn) u->n = nn;
        double *nc = realloc(u->c, sizeof(double) * (size_t)cap);
        if (nc) u->c = nc;
        double *nm = realloc(u->m, sizeof(double) * (size_t)cap);
        if (nm) u->m = nm;
        if (!nt || !nn || !nc || !nm) return -1;
        u->cap = cap;
    }
    u->t[u->size] = t;
    u->n[u->size] = n;
    u->c[u->size] = c;
    u->m[u->size] = m;
    u->size++;
    return 0;
}

/* Add back what the run took, latest first (exact: integer-valued float64). */
static void undo_all(Undo *u, State *s) {
    while (u->size > 0) {
        u->size--;
        Py_ssize_t t = u->t[u->size], n = u->n[u->size];
        s->cpu[t * s->N + n] += u->c[u->size];
        s->mem[t * s->N + n] += u->m[u->size];
        block_update(s, t, n / BLOCK);
    }
}

static int place(const Input *in, State *s, Py_ssize_t k, Undo *u) {
    Py_ssize_t r = in->release[k], e = in->end[k], K = in->K[k];
    double c = in->cpu[k], m = in->mem[k];
    if (K == 0) return 0;
    for (Py_ssize_t t = r; t <= e; t++) {
        Py_ssize_t n = first_fit(s, t, c, m, K);
        if (n < 0) return 0;
        in->first[t - r] = n;
    }
    for (Py_ssize_t t = r; t <= e; t++) {
        commit(s, t, in->first[t - r], c, m);
        if (undo_push(u, t, in->first[t - r], c, m)) return -1;
    }
    return 0;
}

static int scan(const Input *in, State *full, Undo *u) {
    Py_ssize_t R = in->R, T = full->T;
    Py_ssize_t advanced = 0; /* the full state holds the placements of ranks < advanced */
    for (Py_ssize_t a = 0; a < in->A; a++) {
        Py_ssize_t j = in->jobs[a], f = in->fork_at[a];
        in->best[a] = in->top[a];
        for (; advanced < f; advanced++) {
            Py_ssize_t k = in->ranking[advanced];
            for (Py_ssize_t t = in->release[k]; t <= in->end[k]; t++) {
                int64_t n = in->assign[k * T + t];
                if (n >= 0) commit(full, t, n, in->cpu[k], in->mem[k]);
            }
        }
        if (full->N == 0) continue;
        /* the run works on the full state itself and undoes its changes at the end */
        if (!(f == 0 && evaluate(in, full, a, INFINITY, R ? in->value[in->ranking[0]] : 0.0))) {
            for (Py_ssize_t s = f; s < R; s++) {
                Py_ssize_t k = in->ranking[s];
                if (k != j && place(in, full, k, u)) return -1;
                double v = in->value[k];
                if (s + 1 == R || in->value[in->ranking[s + 1]] < v) {
                    if (evaluate(in, full, a, v, s + 1 < R ? in->value[in->ranking[s + 1]] : 0.0)) break;
                }
            }
        }
        undo_all(u, full);
    }
    return 0;
}

static PyObject *critical_values(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[15];
    Py_ssize_t T, N;
    memset(b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "nny*y*y*y*y*y*y*y*y*y*y*y*y*y*w*", &T, &N, &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                          &b[6], &b[7], &b[8], &b[9], &b[10], &b[11], &b[12], &b[13], &b[14]))
        return NULL;
    /* reserve (N), cpu0 (T*N), mem0 (T*N), release, end, K (n_jobs int64), job cpu, job mem, value
     * (n_jobs double), ranking (R int64), assign (n_jobs*T int64, sorted node positions or -1),
     * jobs, fork_at (A int64), top (A double); out: best (A double) */
    Input in;
    in.reserve = b[0].buf;
    in.release = b[3].buf;
    in.end = b[4].buf;
    in.K = b[5].buf;
    in.cpu = b[6].buf;
    in.mem = b[7].buf;
    in.value = b[8].buf;
    in.ranking = b[9].buf;
    in.assign = b[10].buf;
    in.jobs = b[11].buf;
    in.fork_at = b[12].buf;
    in.top = b[13].buf;
    in.best = b[14].buf;
    in.n_jobs = b[3].len / (Py_ssize_t)sizeof(int64_t);
    in.R = b[9].len / (Py_ssize_t)sizeof(int64_t);
    in.A = b[11].len / (Py_ssize_t)sizeof(int64_t);
    PyObject *result = NULL;
    State full;
    Undo undo;
    int failed = 0;
    memset(&full, 0, sizeof(full));
    memset(&undo, 0, sizeof(undo));
    in.first = malloc(sizeof(int64_t) * (size_t)(T + 1));
    if (b[0].len != N * (Py_ssize_t)sizeof(double) || b[1].len != T * N * (Py_ssize_t)sizeof(double) ||
        b[2].len != b[1].len || b[10].len != in.n_jobs * T * (Py_ssize_t)sizeof(int64_t) ||
        b[14].len != in.A * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "critical_values: array sizes do not match T and N");
        goto done;
    }
    if (!in.first || state_alloc(&full, T, N)) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(full.cpu, b[1].buf, (size_t)b[1].len);
    memcpy(full.mem, b[2].buf, (size_t)b[2].len);
    for (Py_ssize_t t = 0; t < T; t++)
        for (Py_ssize_t bl = 0; bl < full.NB; bl++) block_update(&full, t, bl);
    Py_BEGIN_ALLOW_THREADS
    failed = scan(&in, &full, &undo);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    free(in.first);
    free(undo.t);
    free(undo.n);
    free(undo.c);
    free(undo.m);
    state_free(&full);
    for (int x = 0; x < 15; x++)
        if (b[x].obj) PyBuffer_Release(&b[x]);
    return result;
}

static PyMethodDef methods[] = {
    {"critical_values", critical_values, METH_VARARGS,
     "critical_values(T, N, reserve, cpu0, mem0, release, end, K, cpu, mem, value, ranking, assign, jobs, fork_at, "
     "top, best): the exact critical values of the scanned jobs, written into best (see greedex.critical_values)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_greedex_kernel",
                                    "GREEDEX critical values in C (the reference is "
                                    "marketsched.mechanisms.clearing.greedex.critical_values).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__greedex_kernel(void) { return PyModule_Create(&module); }
