/* Egg's per-bid auctioneer (Kang & Parkes 2007, section 3, equations 3-5), in C.
 *
 * Python reference: marketsched.mechanisms.online.egg.auctioneer.clear (read its docstring for the
 * rules and decisions); this is its loop for bids with linear value schedules, one bid at a time
 * instead of a (bids x providers x columns) array. First the reference's checks (run times finite
 * and >= 0, estimates >= 0, no arrival before the book's clock; the same messages) and
 * PriceBook.bucket_index (per resource, the upper edges <= the estimate; not offered past the top
 * bucket). Then per bid b:
 *
 *   1. the usable columns: from the arrival's slot to the last usable one
 *      floor(max(min(a + Delta, d + slot), a) / slot), d the bid's deadline (-inf if its value is 0);
 *   2. per eligible provider k with an offered bucket: the earliest completion x = a + r_k; the
 *      column holding x is priced at x, every later usable column at its start; a cell counts when
 *      the reported value there is > 0 and the time is before a + Delta; eq. 3: the first maximum
 *      of value - price (the earliest time);
 *   3. eq. 4: the largest surplus, then the earliest tau*, then the lower index; scheduled when the
 *      surplus is finite and >= 0; eq. 5: the price of that cell.
 *
 * The value at tau is evaluated as BidBatch.values does (the same operations in the same order:
 * frac = clip((td - tau) / (td - t0), 0, 1), or 1 when td <= t0; v_end + (v_start - v_end) frac if
 * tau <= td, else 0; 0 from the horizon on), the surplus as value - price and the value returned as
 * surplus + price, as the reference does, so every number is the reference's bit for bit (compiled
 * with -ffp-contract=off). The reference's columns outside a bid's own usable range are -inf for
 * that bid (past its horizon or its deadline), so visiting only the bid's range changes nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static double value_at(double tau, double vs, double ve, double t0, double td, double horizon) {
    double span = td - t0, frac = 1.0, w;
    if (span > 0) {
        frac = (td - tau) / span;
        frac = frac < 0.0 ? 0.0 : frac; /* np.clip(x, 0, 1) */
        frac = frac > 1.0 ? 1.0 : frac;
    }
    w = tau <= td ? ve + (vs - ve) * frac : 0.0;
    return tau < horizon ? w : 0.0;
}

static int check(Py_buffer *b, const char *name, Py_ssize_t n, Py_ssize_t itemsize) {
    if (b->len != n * itemsize) {
        PyErr_Format(PyExc_ValueError, "egg auctioneer kernel: %s has %zd bytes, expected %zd", name, b->len,
                     n * itemsize);
        return -1;
    }
    return 0;
}

static PyObject *clear(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[17];
    Py_ssize_t K, H, L;
    long long base;
    double slot, delta, now;
    int has_horizon;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*y*nnnLdddpw*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                          &b[6], &b[7], &b[8], &b[9], &b[10], &b[11], &K, &L, &H, &base, &slot, &delta, &now, &has_horizon,
                          &b[12], &b[13], &b[14], &b[15], &b[16]))
        return NULL;
    PyObject *result = NULL;
    const double *arrival = b[0].buf, *vs = b[1].buf, *ve = b[2].buf, *t0 = b[3].buf, *td = b[4].buf,
                 *hor = b[5].buf, *runtime = b[6].buf, *Q = b[7].buf, *upper = b[8].buf, *prices = b[9].buf;
    const int64_t *nb = b[10].buf;
    const uint8_t *eligible = b[11].buf;
    /* outputs: provider, absolute slot, bucket row (int64); completion, price, value, run time; surplus */
    int64_t *out_k = b[12].buf, *out_slot = b[13].buf;
    double *out_d = b[14].buf; /* (4, n): completion, price, value, run time */
    double *out_surplus = b[15].buf;
    int64_t *out_row = b[16].buf;
    int64_t *rows = NULL;
    Py_ssize_t n = b[0].len / (Py_ssize_t)sizeof(double), R = 1, n_upper = 0;
    if (check(&b[10], "buckets", L, 8)) goto done;
    for (Py_ssize_t d = 0; d < L; d++) {
        R *= nb[d];
        n_upper += K * nb[d];
    }
    if (check(&b[1], "v_start", n, 8) || check(&b[2], "v_end", n, 8) || check(&b[3], "t0", n, 8) ||
        check(&b[4], "t_deadline", n, 8) || check(&b[5], "horizon", has_horizon ? n : 0, 8) ||
        check(&b[6], "runtime", n * K, 8) || check(&b[7], "Q", n * K * L, 8) || check(&b[8], "upper", n_upper, 8) ||
        check(&b[9], "prices", K * R * H, 8) || check(&b[12], "provider", n, 8) || check(&b[13], "slot", n, 8) ||
        check(&b[14], "numbers", 4 * n, 8) || check(&b[15], "surplus", n, 8) || check(&b[16], "row", n, 8) ||
        check(&b[11], "eligible", n * K, 1))
        goto done;
    rows = malloc(sizeof(int64_t) * (size_t)(n * K + 1));
    if (!rows) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n * K; i++) {
        if (!(runtime[i] >= 0 && runtime[i] < INFINITY)) { /* NaN fails both */
            PyErr_Format(PyExc_ValueError, "clear: runtime must be finite, >= 0 and of shape (%zd, %zd)", n, K);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n * K * L; i++) {
        if (!(Q[i] >= 0)) {
            PyErr_SetString(PyExc_ValueError, "PriceBook.bucket_index: resource estimates must be numbers >= 0");
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (arrival[i] < now) {
            PyObject *x = PyFloat_FromDouble(arrival[i]), *y = PyFloat_FromDouble(now);
            if (x && y)
                PyErr_Format(PyExc_ValueError, "clear: bid %zd arrives at %R, before the book's clock %R "
                             "(prices must be quoted at the arrival)", i, x, y);
            Py_XDECREF(x);
            Py_XDECREF(y);
            goto done;
        }
    }
    /* PriceBook.bucket_index: per resource, the number of upper edges <= q (searchsorted, side
     * right); offered iff below the bucket count; the flat row in C order of the buckets */
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t k = 0; k < K; k++) {
            int64_t flat = 0;
            int offered = 1;
            const double *up = upper;
            for (Py_ssize_t d = 0; d < L; d++) {
                double q = Q[(i * K + k) * L + d];
                const double *u = up + k * nb[d];
                int64_t lo = 0, hi = nb[d];
                while (lo < hi) {
                    int64_t mid = (lo + hi) / 2;
                    if (q < u[mid]) hi = mid;
                    else lo = mid + 1;
                }
                if (lo >= nb[d]) offered = 0;
                flat = flat * nb[d] + (lo < nb[d] - 1 ? lo : nb[d] - 1);
                up += K * nb[d];
            }
            rows[i * K + k] = offered ? flat : -1;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        double a = arrival[i], horizon = has_horizon ? hor[i] : INFINITY;
        double d = vs[i] > 0 ? td[i] : -INFINITY;
        d = d < horizon ? d : horizon;
        double hz = a + delta, m = d + slot;
        m = hz < m ? hz : m;
        m = m > a ? m : a;
        int64_t last = (int64_t)floor(m / slot);
        int64_t hmin = (int64_t)floor(a / slot) - base, hmax = last - base + 1;
        if (hmax > H) hmax = H;
        if (hmax <= hmin) continue;
        double best_s = -INFINITY, best_t = INFINITY, best_p = 0.0;
        Py_ssize_t best_k = -1;
        int64_t best_h = 0;
        for (Py_ssize_t k = 0; k < K; k++) {
            int64_t row = rows[i * K + k];
            if (!eligible[i * K + k] || row < 0) continue; /* not asked, or the bucket is not offered */
            const double *P = prices + ((Py_ssize_t)k * R + row) * H;
            double x = a + runtime[i * K + k];
            int64_t f = (int64_t)floor(x / slot) - base; /* absolute column of x, relative to the book */
            double sk = -INFINITY, tk = 0.0, pk = 0.0;
            int64_t hk = -1;
            int64_t h = f > hmin ? f : hmin;
            for (; h < hmax; h++) {
                double tau = h == f ? x : (double)(base + h) * slot, v, s;
                if (tau >= hz) continue;
                /* a later column's value is read at max(start, a), as the reference's (the start) */
                v = value_at(h == f || tau > a ? tau : a, vs[i], ve[i], t0[i], td[i], horizon);
                if (v <= 0) continue;
                s = v - P[h];
                if (s > sk) {
                    sk = s;
                    tk = tau;
                    pk = P[h];
                    hk = h;
                }
            }
            if (hk < 0 || !isfinite(sk)) continue;
            if (sk > best_s || (sk == best_s && tk < best_t)) { /* eq. 4: surplus, earliest tau*, lower index */
                best_s = sk;
                best_t = tk;
                best_p = pk;
                best_k = k;
                best_h = hk;
            }
        }
        if (best_k < 0 || !(best_s >= 0)) continue;
        out_k[i] = best_k;
        out_slot[i] = base + best_h;
        out_d[i] = best_t;
        out_d[n + i] = best_p;
        out_d[2 * n + i] = best_s + best_p;
        out_d[3 * n + i] = runtime[i * K + best_k];
        out_surplus[i] = best_s;
        out_row[i] = rows[i * K + best_k];
    }
    result = Py_None;
    Py_INCREF(result);
done:
    free(rows);
    for (int j = 0; j < 17; j++) PyBuffer_Release(&b[j]);
    return result;
}

static PyMethodDef methods[] = {
    {"clear", clear, METH_VARARGS,
     "clear(arrival, v_start, v_end, t0, t_deadline, horizon, runtime, Q, upper, prices, buckets, eligible, K, L, H, "
     "base, slot, delta, now, has_horizon, provider, slot_out, numbers, surplus, row): auctioneer.clear, linear bids"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_auctioneer_kernel",
                                    "Egg's per-bid auctioneer in C (see auctioneer.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__auctioneer_kernel(void) { return PyModule_Create(&module); }
