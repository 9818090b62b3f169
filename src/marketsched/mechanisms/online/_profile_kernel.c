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

static PyMethodDef methods[] = {
    {"profile_of", profile_of, METH_VARARGS,
     "profile_of(origin, starts, ends, nodes) -> (times, used): ListProfile.of_intervals's lists in C"},
    {"greedy_starts", greedy_starts, METH_VARARGS,
     "greedy_starts(times, used, capacity, runtime, nodes) -> starts: profile.greedy_starts_lists in C"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_profile_kernel",
                                    "Relaxed EES's greedy schedule in C (see profile.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__profile_kernel(void) { return PyModule_Create(&module); }
