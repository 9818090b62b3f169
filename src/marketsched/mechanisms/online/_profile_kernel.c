/* Relaxed EES's greedy schedule (Mutz 2008, section 6.1.3) on an availability profile, in C.
 *
 * Python reference: marketsched.mechanisms.online.profile.greedy_starts_lists (read its docstring
 * for the steps), itself held equal to AvailabilityProfile.place by the tests. The same steps on
 * C arrays of the same numbers: the same comparisons and the one addition start + run time per job,
 * so every start is the reference's bit for bit. The input lists are read, not modified.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

static PyObject *greedy_starts(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *times, *used, *runtime, *nodes;
    long capacity;
    if (!PyArg_ParseTuple(args, "O!O!lO!O!", &PyList_Type, &times, &PyList_Type, &used, &capacity, &PyList_Type,
                          &runtime, &PyList_Type, &nodes))
        return NULL;
    Py_ssize_t L = PyList_GET_SIZE(times), J = PyList_GET_SIZE(runtime);
    if (PyList_GET_SIZE(used) != L || PyList_GET_SIZE(nodes) != J || L == 0) {
        PyErr_SetString(PyExc_ValueError, "greedy_starts: times and used, runtime and nodes must have equal lengths");
        return NULL;
    }
    double *T = malloc(sizeof(double) * (size_t)(L + J + 1));
    long *U = malloc(sizeof(long) * (size_t)(L + J + 1));
    PyObject *out = NULL;
    if (!T || !U) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < L; k++) {
        T[k] = PyFloat_AsDouble(PyList_GET_ITEM(times, k));
        U[k] = PyLong_AsLong(PyList_GET_ITEM(used, k));
    }
    if (PyErr_Occurred()) goto done;
    out = PyList_New(J);
    if (!out) goto done;
    for (Py_ssize_t j = 0; j < J; j++) {
        double r = PyFloat_AsDouble(PyList_GET_ITEM(runtime, j));
        long n = PyLong_AsLong(PyList_GET_ITEM(nodes, j));
        if (PyErr_Occurred()) goto fail;
        long limit = capacity - n;
        Py_ssize_t k = 0, b;
        for (;;) { /* 1. the first run of segments with room that is long enough */
            while (k < L && U[k] > limit) k++;
            if (k == L) {
                PyErr_Format(PyExc_ValueError, "greedy_starts: %ld nodes never fit (the last segment is full)", n);
                goto fail;
            }
            b = k + 1;
            while (b < L && U[b] <= limit) b++;
            if (b == L || T[b] - T[k] >= r) break;
            k = b;
        }
        double s = T[k], end = s + r;
        Py_ssize_t lo = 0, hi = L; /* 2. bisect_right(times, end) - 1, split there */
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (end < T[mid]) hi = mid;
            else lo = mid + 1;
        }
        Py_ssize_t e = lo - 1;
        if (T[e] != end) {
            memmove(T + e + 2, T + e + 1, sizeof(double) * (size_t)(L - e - 1));
            memmove(U + e + 2, U + e + 1, sizeof(long) * (size_t)(L - e - 1));
            T[e + 1] = end;
            U[e + 1] = U[e];
            L++;
            e++;
        }
        for (Py_ssize_t m = k; m < e; m++) U[m] += n; /* 3. the job's nodes on its segments */
        PyObject *f = PyFloat_FromDouble(s);
        if (!f) goto fail;
        PyList_SET_ITEM(out, j, f);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    free(T);
    free(U);
    return out;
}

typedef struct {
    double t;
    long delta;
} Event;

static int event_cmp(const void *a, const void *b) {
    double x = ((const Event *)a)->t, y = ((const Event *)b)->t;
    return (x > y) - (x < y);
}

static PyObject *profile_of(PyObject *self, PyObject *args) {
    /* ListProfile.of_intervals after its checks: the +n/-n events in time order, the running
     * sum after the last event of each time (a sum of integers: the order of equal times does
     * not matter, so an unstable sort gives the reference's lists). */
    (void)self;
    PyObject *starts, *ends, *nodes;
    double origin;
    if (!PyArg_ParseTuple(args, "dO!O!O!", &origin, &PyList_Type, &starts, &PyList_Type, &ends, &PyList_Type, &nodes))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(starts);
    if (PyList_GET_SIZE(ends) != n || PyList_GET_SIZE(nodes) != n) {
        PyErr_SetString(PyExc_ValueError, "profile_of: starts, ends and nodes must have equal lengths");
        return NULL;
    }
    Event *ev = malloc(sizeof(Event) * (size_t)(2 * n + 1));
    PyObject *times = NULL, *used = NULL, *result = NULL;
    if (!ev) return PyErr_NoMemory();
    ev[0].t = origin;
    ev[0].delta = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long k = PyLong_AsLong(PyList_GET_ITEM(nodes, i));
        ev[1 + 2 * i].t = PyFloat_AsDouble(PyList_GET_ITEM(starts, i));
        ev[1 + 2 * i].delta = k;
        ev[2 + 2 * i].t = PyFloat_AsDouble(PyList_GET_ITEM(ends, i));
        ev[2 + 2 * i].delta = -k;
    }
    if (PyErr_Occurred()) goto done;
    qsort(ev, (size_t)(2 * n + 1), sizeof(Event), event_cmp);
    times = PyList_New(0);
    used = PyList_New(0);
    if (!times || !used) goto done;
    long total = 0;
    for (Py_ssize_t i = 0; i < 2 * n + 1; i++) {
        total += ev[i].delta;
        if (i + 1 < 2 * n + 1 && ev[i + 1].t == ev[i].t) continue; /* the last event of this time */
        PyObject *t = PyFloat_FromDouble(ev[i].t), *u = PyLong_FromLong(total);
        int bad = !t || !u || PyList_Append(times, t) || PyList_Append(used, u);
        Py_XDECREF(t);
        Py_XDECREF(u);
        if (bad) goto done;
    }
    result = PyTuple_Pack(2, times, used);
done:
    free(ev);
    Py_XDECREF(times);
    Py_XDECREF(used);
    return result;
}


/* ------------------------------------------------------------------------------------------------
 * The 'shared' estimator of the expected-externality payments (Mutz 2008, eq. 4.4; Python reference:
 * marketsched.mechanisms.online.ees.welfare_shared and payments_from_welfare), in two calls around
 * the one matrix product the caller leaves to NumPy (b = D @ weights, a BLAS call whose order of
 * additions is the library's):
 *
 * 1. prior_draws: the draws of step 1, D (S x m, row by row) then V (S), from the Generator's own bit
 *    generator (its PyCapsule "BitGenerator", NumPy's public bitgen_t), bit for bit the numbers
 *    Generator.integers / Generator.uniform give: an EqualPoints prior of k points draws indices with
 *    Lemire's bounded integers as NumPy's random_bounded_uint8_fill (k <= 256, 32-bit words cut
 *    into bytes, a fresh buffer per call) or random_bounded_uint64_fill (k > 256, 32-bit words),
 *    a Uniform prior low + (high - low) * next_double (NumPy's random_uniform);
 * 2. shared_payments: steps 2-3 and the payments, the same IEEE operations in the same order as the
 *    NumPy expressions: the 1-D sums as NumPy's pairwise summation (8 accumulators, blocks of 128)
 *    after its initial 0.0, the column sums over the draws row by row (pairwise for one column, as
 *    NumPy reduces a single column as one 1-D sum).
 */
typedef struct {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} bitgen_t; /* numpy/random/bitgen.h */

static inline uint8_t buffered_uint8(bitgen_t *g, int *bcnt, uint32_t *buf) {
    if (!*bcnt) {
        *buf = g->next_uint32(g->state);
        *bcnt = 3;
    } else {
        *buf >>= 8;
        *bcnt -= 1;
    }
    return (uint8_t)*buf;
}

static inline uint8_t bounded_lemire_uint8(bitgen_t *g, uint8_t rng, int *bcnt, uint32_t *buf) {
    const uint8_t rng_excl = (uint8_t)(rng + 1);
    uint16_t m = (uint16_t)((uint16_t)buffered_uint8(g, bcnt, buf) * rng_excl);
    uint8_t leftover = (uint8_t)(m & 0xFF);
    if (leftover < rng_excl) {
        const uint8_t threshold = (uint8_t)((uint8_t)(UINT8_MAX - rng) % rng_excl);
        while (leftover < threshold) {
            m = (uint16_t)((uint16_t)buffered_uint8(g, bcnt, buf) * rng_excl);
            leftover = (uint8_t)(m & 0xFF);
        }
    }
    return (uint8_t)(m >> 8);
}

static inline uint32_t bounded_lemire_uint32(bitgen_t *g, uint32_t rng) {
    const uint32_t rng_excl = rng + 1;
    uint64_t m = (uint64_t)g->next_uint32(g->state) * rng_excl;
    uint32_t leftover = (uint32_t)(m & 0xFFFFFFFFUL);
    if (leftover < rng_excl) {
        const uint32_t threshold = (UINT32_MAX - rng) % rng_excl;
        while (leftover < threshold) {
            m = (uint64_t)g->next_uint32(g->state) * rng_excl;
            leftover = (uint32_t)(m & 0xFFFFFFFFUL);
        }
    }
    return (uint32_t)(m >> 32);
}

/* One prior's draws into out[0..n): points (bytes of k float64 numbers) or, when points is None, uniform. */
static int draw_prior(bitgen_t *g, PyObject *points, double low, double range, double *out, Py_ssize_t n) {
    if (points == Py_None) {
        for (Py_ssize_t i = 0; i < n; i++) out[i] = low + range * g->next_double(g->state);
        return 0;
    }
    Py_ssize_t k = PyBytes_GET_SIZE(points) / (Py_ssize_t)sizeof(double);
    if (k < 1 || k >= 0xFFFFFFFFL || PyBytes_GET_SIZE(points) % (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "prior_draws: a prior of points needs 1 to 2^32 - 2 float64 points");
        return -1;
    }
    const double *pts = (const double *)PyBytes_AS_STRING(points);
    if (k == 1) {
        for (Py_ssize_t i = 0; i < n; i++) out[i] = pts[0];
    } else if (k <= 256) { /* Generator.integers(0, k, dtype=np.uint8): random_bounded_uint8_fill */
        uint8_t rng = (uint8_t)(k - 1);
        uint32_t buf = 0;
        int bcnt = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            out[i] = pts[rng == 0xFF ? buffered_uint8(g, &bcnt, &buf) : bounded_lemire_uint8(g, rng, &bcnt, &buf)];
    } else { /* Generator.integers(0, k, dtype=np.int64): random_bounded_uint64_fill, a 32-bit range */
        uint32_t rng = (uint32_t)(k - 1);
        for (Py_ssize_t i = 0; i < n; i++) out[i] = pts[bounded_lemire_uint32(g, rng)];
    }
    return 0;
}

/* A writable or read-only C-contiguous buffer of n doubles. */
static int double_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t n, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if (view->itemsize != sizeof(double) || !(strcmp(f, "d") == 0 || strcmp(f, "<d") == 0 || strcmp(f, "=d") == 0) ||
        view->len != n * (Py_ssize_t)sizeof(double)) {
        PyErr_Format(PyExc_ValueError, "shared payments: %s must hold %zd float64 numbers", name, n);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *prior_draws(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *D, *V, *dpoints, *vpoints;
    double dlow, drange, vlow, vrange;
    Py_ssize_t S, m;
    if (!PyArg_ParseTuple(args, "OnnOOddOOdd", &capsule, &S, &m, &D, &dpoints, &dlow, &drange, &V, &vpoints, &vlow,
                          &vrange))
        return NULL;
    if ((dpoints != Py_None && !PyBytes_Check(dpoints)) || (vpoints != Py_None && !PyBytes_Check(vpoints))) {
        PyErr_SetString(PyExc_TypeError, "prior_draws: points must be bytes of float64 numbers or None");
        return NULL;
    }
    bitgen_t *g = PyCapsule_GetPointer(capsule, "BitGenerator");
    if (!g) return NULL;
    Py_buffer dv, vv;
    if (double_buffer(D, &dv, S * m, 1, "D") < 0) return NULL;
    if (double_buffer(V, &vv, S, 1, "V") < 0) {
        PyBuffer_Release(&dv);
        return NULL;
    }
    int bad = draw_prior(g, dpoints, dlow, drange, dv.buf, S * m) || draw_prior(g, vpoints, vlow, vrange, vv.buf, S);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&vv);
    if (bad) return NULL;
    Py_RETURN_NONE;
}

/* NumPy's pairwise summation of a[0..n) with stride (numpy/_core/src/umath/loops_utils.h.src). */
static double pairwise_sum(const double *a, Py_ssize_t n, Py_ssize_t stride) {
    if (n < 8) {
        double res = 0.;
        for (Py_ssize_t i = 0; i < n; i++) res += a[i * stride];
        return res;
    } else if (n <= 128) {
        double r[8], res;
        Py_ssize_t i;
        for (int k = 0; k < 8; k++) r[k] = a[k * stride];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int k = 0; k < 8; k++) r[k] += a[(i + k) * stride];
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i * stride];
        return res;
    } else {
        Py_ssize_t n2 = n / 2;
        n2 -= n2 % 8;
        return pairwise_sum(a, n2, stride) + pairwise_sum(a + n2 * stride, n - n2, stride);
    }
}

static PyObject *shared_payments(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[8];
    double front;
    Py_ssize_t S, m;
    if (!PyArg_ParseTuple(args, "dnnOOOOOOO", &front, &S, &m, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6]))
        return NULL;
    if (S < 1 || m < 1) {
        PyErr_SetString(PyExc_ValueError, "shared_payments: needs at least one draw and one waiting job");
        return NULL;
    }
    static const char *names[7] = {"D", "V", "b", "weights", "delay_cost", "xi", "payments"};
    const Py_ssize_t sizes[7] = {S * m, S, S, m, m, m + 1, m + 1};
    Py_buffer v[7];
    int got = 0;
    double *rest = NULL, *col = NULL;
    PyObject *result = NULL;
    for (; got < 7; got++)
        if (double_buffer(objs[got], &v[got], sizes[got], got >= 5, names[got]) < 0) goto done;
    const double *D = v[0].buf, *V = v[1].buf, *b = v[2].buf, *w = v[3].buf, *d = v[4].buf;
    double *xi = v[5].buf, *pay = v[6].buf;
    rest = malloc(sizeof(double) * (size_t)(S > m ? S : m));
    col = calloc((size_t)m, sizeof(double));
    if (!rest || !col) {
        PyErr_NoMemory();
        goto done;
    }
    /* xi_0: np.where(front >= b, -b, 0.0).sum() / S */
    for (Py_ssize_t s = 0; s < S; s++) rest[s] = front >= b[s] ? -b[s] : 0.0;
    xi[0] = (0.0 + pairwise_sum(rest, S, 1)) / (double)S;
    /* rest = b[:, None] - D * w; bj = w * d + rest; xi_j = where(V >= bj, V - rest, 0).sum(axis=0) / S */
    if (m == 1) {
        for (Py_ssize_t s = 0; s < S; s++) {
            double r = b[s] - D[s] * w[0], bj = w[0] * d[0] + r;
            rest[s] = V[s] >= bj ? V[s] - r : 0.0;
        }
        xi[1] = (0.0 + pairwise_sum(rest, S, 1)) / (double)S;
    } else {
        for (Py_ssize_t s = 0; s < S; s++)
            for (Py_ssize_t j = 0; j < m; j++) {
                double r = b[s] - D[s * m + j] * w[j], bj = w[j] * d[j] + r;
                col[j] = col[j] + (V[s] >= bj ? V[s] - r : 0.0);
            }
        for (Py_ssize_t j = 0; j < m; j++) xi[j + 1] = col[j] / (double)S;
    }
    /* payments_from_welfare: (xi.sum() - xi) / (n - 1) - xi */
    double total = 0.0 + pairwise_sum(xi, m + 1, 1);
    for (Py_ssize_t k = 0; k <= m; k++) pay[k] = (total - xi[k]) / (double)m - xi[k];
    result = Py_None;
    Py_INCREF(result);
done:
    free(rest);
    free(col);
    for (int k = 0; k < got; k++) PyBuffer_Release(&v[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"prior_draws", prior_draws, METH_VARARGS,
     "prior_draws(capsule, S, m, D, d_points, d_low, d_range, V, v_points, v_low, v_range): the 'shared' "
     "estimator's draws (D then V) from a Generator's bit generator, as Generator.integers/uniform give them"},
    {"shared_payments", shared_payments, METH_VARARGS,
     "shared_payments(front_value, S, m, D, V, b, weights, delay_cost, xi, payments): welfare_shared's steps 2-3 "
     "and payments_from_welfare after b = D @ weights, into xi and payments"},
    {"profile_of", profile_of, METH_VARARGS,
     "profile_of(origin, starts, ends, nodes) -> (times, used): ListProfile.of_intervals's lists in C"},
    {"greedy_starts", greedy_starts, METH_VARARGS,
     "greedy_starts(times, used, capacity, runtime, nodes) -> starts: profile.greedy_starts_lists in C"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_profile_kernel",
                                    "Relaxed EES's greedy schedule, profiles and shared-draw payments in C (see profile.py, ees.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__profile_kernel(void) { return PyModule_Create(&module); }
