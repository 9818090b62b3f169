"""Best responses in the fixed-budget game: closed form, local search, greedy adjustment.

Source: Feldman, Lai & Zhang (2005, ACM EC), section 4. Everything here is a pure function of one
user's weights w, the other users' total bids y (the reserve eps already added by the caller:
y_j = eps + sum_{k != i} x_kj) and the user's budget X.

Infinite parallelism, section 4.1 ("sort and prefix"), maximise sum_j w_j x_j / (x_j + y_j)
subject to sum_j x_j = X, x_j >= 0:

1. Sort the machines so that w_1/y_1 >= w_2/y_2 >= ... >= w_n/y_n.
2. Find the largest k with sqrt(w_k y_k) / sum_{i<=k} sqrt(w_i y_i) * (X + sum_{i<=k} y_i) - y_k >= 0.
3. x_j = 0 for j > k, and x_j = sqrt(w_j y_j) / sum_{i<=k} sqrt(w_i y_i) * (X + sum_{i<=k} y_i) - y_j
   for j <= k.

Decisions taken here (the paper leaves them open):

* y_j = 0 on a machine with w_j > 0 has no best response (the supremum, an infinitesimal bid
  taking the whole machine, is not attained). This is refused with a ValueError; use a
  reserve eps > 0 (the perturbed game Q^eps of appendix A), which makes every y_j >= eps.
* Machines with w_j = 0 get ratio 0 (also when y_j = 0: 0/0 is defined as 0) and never a bid.
* Ties in w_j/y_j keep machine-index order (stable sort); "largest k" as the paper writes it
  (checked numerically while planning this project: "extend until the inequality first fails" gives the same answer).
* Round-off: tiny negative bids are clipped to 0 and the bids rescaled to sum to X exactly.
* A user with all weights 0 splits its budget evenly (appendix A's convention).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# ----------------------------------------------------------------------------------------
# Section 4.1: closed form, one user (fast path for sequential dynamics) and all users at once
# ----------------------------------------------------------------------------------------


def br_one(w: np.ndarray, y: np.ndarray, budget: float) -> np.ndarray:
    """Section 4.1 for one user, no input checks; y > 0 wherever w > 0."""
    ratio = np.divide(w, y, out=np.zeros_like(w), where=w > 0)
    order = np.argsort(ratio)[::-1]                               # step 1 (descending)
    s = np.sqrt(w * y)
    ss = s[order]
    ys = y[order]
    cs = np.cumsum(ss)
    scale = np.cumsum(ys)
    scale += budget
    # step 2: x_k >= 0  <=>  s_k (X + sum y) >= y_k sum s  (multiplied out, no division)
    ok = np.flatnonzero((ss > 0) & (ss * scale >= ys * cs))
    if ok.size == 0:                                              # all weights zero
        return np.full(w.shape[0], budget / w.shape[0])
    k = ok[-1]
    # step 3: x_j = s_j F - y_j on the prefix with F = (X + sum_{i<=k} y_i) / sum_{i<=k} s_i.
    # Outside the prefix w_j/y_j <= lambda = 1/F^2, i.e. s_j F - y_j <= 0, so the clipped
    # formula applied to every machine in its own order gives the same bids without a scatter.
    x = s * (scale[k] / cs[k]) - y
    np.maximum(x, 0.0, out=x)
    x *= budget / x.sum()
    return x


def br_rows(w: np.ndarray, y: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """Section 4.1 for every row of (w, y) at once (vectorised sort and prefix, no checks).

    Large batches are cut into row blocks run on a few threads (NumPy releases the GIL in
    sorting and arithmetic), which also keeps the temporaries in cache.
    """
    m, n = w.shape
    if m * n >= 1 << 18 and m >= 16:
        workers = max(1, min(os.cpu_count() or 1, 8))
        block = max(8, min(512, -(-m // workers)))
        out = np.empty_like(w)

        def run(a: int) -> None:
            out[a:a + block] = _br_block(w[a:a + block], y[a:a + block], budgets[a:a + block])

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, range(0, m, block)))
        return out
    return _br_block(w, y, budgets)


def _br_block(w: np.ndarray, y: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    m, n = w.shape
    ratio = np.divide(w, y, out=np.zeros_like(w), where=w > 0)
    order = np.argsort(ratio, axis=1)[:, ::-1]                    # step 1 (descending)
    s = np.sqrt(w * y)
    ss = np.take_along_axis(s, order, axis=1)
    ys = np.take_along_axis(y, order, axis=1)
    cs = np.cumsum(ss, axis=1)
    scale = np.cumsum(ys, axis=1)
    scale += budgets[:, None]
    ok = ss * scale >= ys * cs                                    # step 2, multiplied out
    ok &= ss > 0
    k = n - 1 - np.argmax(ok[:, ::-1], axis=1)                    # largest k (0-based)
    rows = np.arange(m)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = scale[rows, k] / cs[rows, k]
        x = s * factor[:, None]                                   # step 3 (see br_one)
    x -= y
    np.maximum(x, 0.0, out=x)
    none = ~ok.any(axis=1)                                        # all weights zero
    if none.any():
        x[none] = 1.0
    x *= (budgets / x.sum(axis=1))[:, None]
    return x


def _check_inputs(w, y, budget, reserve):
    w = np.asarray(w, dtype=float)
    y = np.asarray(y, dtype=float)
    if w.ndim not in (1, 2) or w.shape != y.shape:
        raise ValueError(f"weights and others' bids must be 1-D or 2-D of equal shape, got {w.shape} and {y.shape}")
    for name, arr in (("weights", w), ("others' bids", y)):
        bad = ~np.isfinite(arr) | (arr < 0)
        if bad.any():
            where = tuple(int(v) for v in np.argwhere(bad)[0])
            raise ValueError(f"{name} must be finite and >= 0; entry {where} is {arr[where]}")
    rows = 1 if w.ndim == 1 else w.shape[0]
    b = np.asarray(budget, dtype=float)
    b = np.full(rows, float(b)) if b.ndim == 0 else b
    if b.shape != (rows,) or np.any(~np.isfinite(b)) or np.any(b <= 0):
        raise ValueError(f"budget must be positive and finite, one per row ({rows}), got {budget!r}")
    if not np.isfinite(reserve) or reserve < 0:
        raise ValueError(f"reserve must be finite and >= 0, got {reserve}")
    ye = y + reserve
    empty = (ye <= 0) & (w > 0)
    if empty.any():
        where = tuple(int(v) for v in np.argwhere(empty)[0])
        raise ValueError(
            f"machine {where[-1]} has no other bid and no reserve but a positive weight (entry {where}): "
            "no best response exists (section 2); use reserve > 0 (appendix A's perturbed game)")
    return w, ye, b


def best_response(weights, others, budget, reserve: float = 0.0) -> np.ndarray:
    """Best response of section 4.1 (infinite parallelism, linear utility), closed form.

    weights: (n,) for one user or (m, n) for many users at once; others: the other users' total
    bids y_j, same shape; budget: X (scalar or one per row); reserve: the host reserve bid eps
    of appendix A, added to every y_j. Returns the bids, same shape as weights.
    """
    w, ye, b = _check_inputs(weights, others, budget, reserve)
    if w.ndim == 1:
        return br_one(w, ye, float(b[0]))
    return br_rows(w, ye, b)


def response_utility(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """sum_j w_j x_j / (x_j + y_j) along the last axis (y includes the reserve; 0 where x = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(x > 0, x / (x + y), 0.0)
    return (w * r).sum(axis=-1)


def marginals(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dU/dx_j = w_j y_j / (x_j + y_j)^2 (equation (1) with Y_j - x_j = y_j)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(w > 0, w * y / (x + y) ** 2, 0.0)


def kkt_violation(w, x, y) -> float:
    """How far bids x are from condition (1): equal marginals lambda on the machines bid on and
    no larger marginal elsewhere. Returns max over machines of the relative excess of the
    marginal over lambda (bid machines: |g_j - lambda|, others: max(0, g_j - lambda))."""
    g = marginals(np.asarray(w, float), np.asarray(x, float), np.asarray(y, float))
    bid = np.asarray(x) > 0
    if not bid.any():
        return float("inf")
    lam = g[bid].mean()
    dev_bid = np.abs(g[bid] - lam).max()
    dev_out = np.maximum(g[~bid] - lam, 0).max() if (~bid).any() else 0.0
    return float(max(dev_bid, dev_out) / lam)


# ----------------------------------------------------------------------------------------
# Section 4.2: local search for finite parallelism
# ----------------------------------------------------------------------------------------


def _sorted_values(idx: np.ndarray, w: np.ndarray, y: np.ndarray, s: np.ndarray,
                   budget: float) -> tuple[np.ndarray, np.ndarray]:
    """Best-response utility and sqrt(lambda) on each machine set idx[..., :] already held in
    decreasing w/y order (section 4.1 steps 2-3 without the sort).

    U = sum_{j<=k} w_j - (sum_{j<=k} s_j)^2 / (X + sum_{j<=k} y_j) with s_j = sqrt(w_j y_j)
    (substitute x_j = s_j F - y_j, F = (X + sum y) / sum s, into sum_j w_j x_j / (x_j + y_j)),
    and sqrt(lambda) = 1/F.
    """
    ss, ys, ws = s[idx], y[idx], w[idx]
    cs = np.cumsum(ss, axis=-1)
    scale = np.cumsum(ys, axis=-1)
    scale += budget
    ok = (ss > 0) & (ss * scale >= ys * cs)
    last = (idx.shape[-1] - 1 - np.argmax(ok[..., ::-1], axis=-1))[..., None]
    cw = np.take_along_axis(np.cumsum(ws, axis=-1), last, axis=-1)[..., 0]
    c = np.take_along_axis(cs, last, axis=-1)[..., 0]
    d = np.take_along_axis(scale, last, axis=-1)[..., 0]
    any_ok = ok.any(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(any_ok, cw - c * c / d, 0.0), np.where(any_ok, c / d, 0.0)


def _swap_values(A: np.ndarray, outside: np.ndarray, w: np.ndarray, y: np.ndarray, s: np.ndarray,
                 ratio: np.ndarray, budget: float, rows: slice = slice(None)) -> np.ndarray:
    """U(B) for the swaps B = A - {A[p]} + {outside[b]}, p in ``rows``, as a (p, b) array.

    A is held in decreasing w/y order, so each B in that order is A with one entry removed and
    one inserted at its rank: the rows are built by index arithmetic, no sort.
    """
    k = A.shape[0]
    ins = np.searchsorted(-ratio[A], -ratio[outside], side="right")   # rank of each outside in A
    pr = np.arange(k)[rows]
    p = pr[:, None, None]
    pos = (ins[None, :] - (pr[:, None] < ins[None, :]))[:, :, None]
    t = np.arange(k)[None, None, :]
    tp = np.where(t < pos, t, t - 1)
    src = np.minimum(tp + (tp >= p), k - 1)
    idx = np.where(t == pos, outside[None, :, None], A[src])              # (k, q, k) machine ids
    return _sorted_values(idx, w, y, s, budget)[0]


def local_search_one(w: np.ndarray, y: np.ndarray, budget: float, k: int,
                      rel_tol: float = 1e-9, max_swaps: int = 1000) -> tuple[np.ndarray, int]:
    """Section 4.2 for one user, no checks; y > 0 wherever w > 0. Returns (bids, swaps made)."""
    n = w.shape[0]
    if k >= n:
        return br_one(w, y, budget), 0
    ratio = np.divide(w, y, out=np.zeros_like(w), where=w > 0)
    s = np.sqrt(w * y)
    order = np.argsort(-ratio, kind="stable")
    A = order[:k].copy()                                          # step 1 (held in w/y order)
    xa = br_one(w[A], y[A], budget)                              # step 2
    ua = float(response_utility(w[A], xa, y[A]))
    swaps = 0
    inside = np.zeros(n, dtype=bool)
    while swaps < max_swaps:
        inside[:] = False
        inside[A] = True
        outside = order[~inside[order]]                           # candidates j, by w/y
        # Pruning that cannot change the answer: B = A - a + b bids on b only if
        # w_b/y_b > lambda(B) >= lambda(A - a), otherwise U(B) = U(A - a) <= U(A). So outside
        # machines with w_b/y_b <= min_a lambda(A - a) never improve (a suffix of `outside`).
        if k > 1:
            drop = np.arange(k - 1)[None, :]
            rest = A[drop + (drop >= np.arange(k)[:, None])]          # (k, k - 1): A without A[p]
            lam_min = float(np.min(_sorted_values(rest, w, y, s, budget)[1])) ** 2
        else:
            lam_min = 0.0
        outside = outside[: int(np.count_nonzero(ratio[outside] > lam_min * (1 - 1e-12)))]
        if outside.size == 0:
            break
        # steps 3-5: the swaps of a block of i's at once (vectorised), blocks in loop order, so
        # the first improving swap found is the paper's first improvement.
        block = max(1, 8192 // (k * outside.size))
        found = None
        for p0 in range(0, k, block):
            ub = _swap_values(A, outside, w, y, s, ratio, budget, slice(p0, p0 + block))
            better = (ub > ua + rel_tol * max(abs(ua), 1e-300)).ravel()   # "U(B) > U(A)", tolerance
            if better.any():
                c = int(np.argmax(better))
                found = (p0 + c // outside.size, c % outside.size, float(ub.ravel()[c]))
                break
        if found is None:
            break
        p, b, new_u = found
        A = np.delete(A, p)
        A = np.insert(A, np.searchsorted(-ratio[A], -ratio[outside[b]], side="right"), outside[b])
        ua = new_u
        swaps += 1
    x = np.zeros(n)
    x[A] = br_one(w[A], y[A], budget)                            # step 6
    return x, swaps


def local_search(weights, others, budget, k: int, reserve: float = 0.0,
                 rel_tol: float = 1e-9) -> tuple[np.ndarray, int]:
    """Local-search best response for finite parallelism k (section 4.2). Returns (bids, swaps).

    1. A = the k machines with the highest w_j / y_j.
    2. U(A) = utility of the closed-form best response (section 4.1) restricted to A.
    3-5. For each i in A and each j not in A, B = A - {i} + {j}; if U(B) > U(A), A <- B, goto 2.
    6. Output x(A).

    Decisions (the paper leaves them open): first improvement as written, in
    the loop order "i over A in the order A is held, j over the outside machines by decreasing
    w_j/y_j" (all swaps of a pass are evaluated at once, vectorised, and the first improving
    one in that order is taken, which is the same as the paper's nested loop); "U(B) > U(A)"
    means better by more than ``rel_tol`` relatively (without one, the search can go on with
    endless 1e-12 improvements); at most 1000 swaps per call.
    """
    w, ye, b = _check_inputs(weights, others, budget, reserve)
    if w.ndim != 1:
        raise ValueError(f"local_search takes one user's 1-D weights, got shape {w.shape}")
    if int(k) != k or k < 1:
        raise ValueError(f"parallelism bound k must be an integer >= 1, got {k}")
    return local_search_one(w, ye, float(b[0]), int(k), rel_tol)


# ----------------------------------------------------------------------------------------
# Section 4.3: local greedy adjustment
# ----------------------------------------------------------------------------------------


def greedy_marginals(w: np.ndarray, x: np.ndarray, y: np.ndarray,
                     utility: Callable[[np.ndarray], np.ndarray] | None = None,
                     h: float = 1e-6) -> np.ndarray:
    """Marginal utility of one more unit of money on each machine.

    Linear utility (``utility=None``): analytic, w_j y_j / (x_j + y_j)^2. Black-box utility:
    ``utility`` maps a (b, n) array of share vectors to (b,) utilities and the marginal is the
    forward difference (U(r(x + h e_j)) - U(r(x))) / h (decision: the paper says only that the
    user "has a way to measure his utility").
    """
    if utility is None:
        return marginals(w, x, y)
    n = x.shape[0]
    xs = np.vstack([x, x + h * np.eye(n)])
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(xs > 0, xs / (xs + y), 0.0)
    u = np.asarray(utility(r), dtype=float)
    return (u[1:] - u[0]) / h


def greedy_step(w: np.ndarray, x: np.ndarray, y: np.ndarray, step: float,
                utility: Callable[[np.ndarray], np.ndarray] | None = None,
                marginal_tol: float = 0.0) -> tuple[np.ndarray, float]:
    """One local greedy adjustment (section 4.3). Returns (new bids, relative marginal gap).

    1. Find the machine with the highest marginal utility and, among the machines the user
       bids on, the one with the lowest (decision: money can only be taken where there is some).
    2. Move ``step`` money (or all there is, if less) from the lowest to the highest.

    The relative marginal gap (g_max - g_min) / g_max is the paper's "marginal utility gap"
    (section 5); when it is already below ``marginal_tol`` the user does not move (decision:
    otherwise a converged user would oscillate by one step forever).
    """
    g = greedy_marginals(w, x, y, utility)
    hi = int(np.argmax(g))
    bid = x > 0
    lo = int(np.argmin(np.where(bid, g, np.inf)))
    gap = float((g[hi] - g[lo]) / g[hi]) if g[hi] > 0 else 0.0
    if gap <= marginal_tol or hi == lo:
        return x, gap
    new = x.copy()
    amount = min(step, new[lo])
    new[lo] -= amount
    new[hi] += amount
    return new, gap
