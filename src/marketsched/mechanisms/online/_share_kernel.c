/* The share market with ZIC bidders (Stößer 2009, sections 6.2.2, 6.2.3 and 6.4.1), its rounds in C.
 *
 * Python reference: marketsched.mechanisms.online.share.ShareMarketPolicy (chunked path, fast=False)
 * with marketsched.behaviour.learning.ZIC; read their docstrings for the market and its decisions.
 * One call runs consecutive pieces of constant active set (the plan's segments, cut to at most
 * chunk_elements numbers) on uniforms drawn by the caller from the run's Generator in the
 * reference's order (second by second, the active jobs in row order), so every bid is the
 * reference's bit for bit, and with it every payment (whole-number bids times whole-number
 * CPUs: sums of integers below 2^53, exact in any order). Steps per second of a piece of n jobs:
 *
 *   1. ZIC bid of job k: b = min(floor(u v) + 1, v), v = floor(true value);
 *   2. the rule's input: b c (basis "total") or b (basis "per_cpu");
 *   3. shares: Proportional Share, in / sum(in); Sanghavi-Hajek, a = in / max(in) and
 *      x_j = a_j sum_i w_i f(s_i) / (1 - s_i a_j), f(s) = prod_k (1 - s a_k), on the Gauss-Legendre
 *      rule with ceil(n / 2) nodes on [0, 1] (exact for the integrand's degree n - 1; the
 *      reference's "direct" method without its tail cut, which changes a share by < 2^-60);
 *   4. CPUs used x = min(c, share C); the piece's totals of x and b are added to the job's.
 *
 * The CPU-seconds received are the reference's up to floating-point rounding (the order of the
 * products and sums differs from NumPy's reductions and BLAS), not bit for bit; the tests hold
 * them within 1e-12 relative. Compiled with -ffp-contract=off like the other kernels.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static PyObject *run(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bu, btop, bcpu, brows, blen, bn, boff, bgs, bgw, brec, bbid;
    double capacity;
    int sh, total;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*dppy*y*w*w*", &bu, &btop, &bcpu, &brows, &blen, &bn, &boff, &capacity,
                          &sh, &total, &bgs, &bgw, &brec, &bbid))
        return NULL;
    Py_buffer *all[] = {&bu, &btop, &bcpu, &brows, &blen, &bn, &boff, &bgs, &bgw, &brec, &bbid};
    PyObject *result = NULL;
    const double *u = bu.buf, *top = btop.buf, *cpus = bcpu.buf, *gs = bgs.buf, *gw = bgw.buf;
    const int64_t *rows = brows.buf, *plen = blen.buf, *pn = bn.buf, *poff = boff.buf;
    double *received = brec.buf, *bidsum = bbid.buf;
    Py_ssize_t pieces = blen.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t nu = bu.len / (Py_ssize_t)sizeof(double), gmax = bgs.len / (Py_ssize_t)sizeof(double);
    Py_ssize_t nmax = 1, need = 0;
    for (Py_ssize_t p = 0; p < pieces; p++) {
        if (pn[p] > nmax) nmax = pn[p];
        need += plen[p] * pn[p];
    }
    if (need != nu) {
        PyErr_Format(PyExc_ValueError, "share kernel: %zd uniforms for %zd draws", nu, need);
        goto done;
    }
    Py_ssize_t mmax = (nmax + 1) / 2;
    if (mmax * (mmax + 1) / 2 > gmax) {
        PyErr_Format(PyExc_ValueError, "share kernel: Gauss table up to %zd nodes needed", mmax);
        goto done;
    }
    double *scratch = malloc(sizeof(double) * (size_t)(6 * nmax + mmax * nmax + 2 * mmax));
    if (!scratch) {
        PyErr_NoMemory();
        goto done;
    }
    double *v = scratch, *c = v + nmax, *b = c + nmax, *in = b + nmax, *sx = in + nmax, *sb = sx + nmax;
    double *t = sb + nmax, *g = t + mmax * nmax;
    const double *uu = u;
    for (Py_ssize_t p = 0; p < pieces; p++) {
        Py_ssize_t n = pn[p], L = plen[p];
        const int64_t *r = rows + poff[p];
        for (Py_ssize_t k = 0; k < n; k++) {
            v[k] = top[r[k]];
            c[k] = cpus[r[k]];
            sx[k] = 0.0;
            sb[k] = 0.0;
        }
        Py_ssize_t m = (n + 1) / 2;
        const double *s = gs + m * (m - 1) / 2, *w = gw + m * (m - 1) / 2;
        for (Py_ssize_t sec = 0; sec < L; sec++, uu += n) {
            double hi = 0.0, sum = 0.0;
            for (Py_ssize_t k = 0; k < n; k++) {
                double x = floor(uu[k] * v[k]) + 1.0;
                b[k] = x < v[k] ? x : v[k];
                in[k] = total ? b[k] * c[k] : b[k];
                if (in[k] > hi) hi = in[k];
                sum += in[k];
            }
            if (!sh) {
                for (Py_ssize_t k = 0; k < n; k++) {
                    double x = in[k] / sum * capacity;
                    sx[k] += c[k] < x ? c[k] : x;
                    sb[k] += b[k];
                }
                continue;
            }
            for (Py_ssize_t k = 0; k < n; k++) in[k] /= hi; /* a_k, max 1 */
            double *gg = g;
            for (Py_ssize_t i = 0; i < m; i++) {
                double f = 1.0, *ti = t + i * nmax;
                for (Py_ssize_t k = 0; k < n; k++) {
                    ti[k] = 1.0 - s[i] * in[k];
                    f *= ti[k];
                }
                gg[i] = w[i] * f;
            }
            for (Py_ssize_t k = 0; k < n; k++) {
                double integral = 0.0;
                for (Py_ssize_t i = 0; i < m; i++) integral += gg[i] / t[i * nmax + k];
                double x = in[k] * integral * capacity;
                sx[k] += c[k] < x ? c[k] : x;
                sb[k] += b[k];
            }
        }
        for (Py_ssize_t k = 0; k < n; k++) {
            received[r[k]] += sx[k];
            bidsum[r[k]] += sb[k];
        }
    }
    free(scratch);
    result = Py_None;
    Py_INCREF(result);
done:
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) PyBuffer_Release(all[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(uniforms, top, cpus, rows, piece_len, piece_n, piece_offset, capacity, sh, total, gauss_s, gauss_w, "
     "received, bidsum): the rounds of consecutive pieces; adds to received and bidsum"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_share_kernel",
                                    "The share market's rounds with ZIC bidders in C (see share.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__share_kernel(void) { return PyModule_Create(&module); }
