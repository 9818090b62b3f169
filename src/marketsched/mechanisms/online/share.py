"""Markets for a shared, divisible resource: Proportional Share and Sanghavi-Hajek, pay-as-bid.

Source: Stößer (2009), chapter 6 and appendix D.5. Sanghavi & Hajek (2004) for the allocation rule, Johari &
Tsitsiklis (2004) for Proportional Share's bounds, Stoica et al. (1997) for reservations.

What is here
------------
1. **Allocation rules** (section 6.2): a bid vector ``b`` (all bids >= 0, one > 0) is mapped to
   shares ``x`` of one unit, ``sum(x) == 1``; payments are **pay-as-bid** (user ``j`` pays
   ``b_j`` whatever it gets), unit prices are ``b_j / x_j``.

   * :func:`ps_shares`, Proportional Share: ``x_j = b_j / sum_k b_k``;
   * :func:`sh_shares`, Sanghavi-Hajek (section 6.2.3):
     ``x_j = (b_j / b_max) * integral_0^1 prod_{k != j} (1 - s b_k / b_max) ds``,
     evaluated exactly (see "The exact SH integral" below);
   * :func:`sh_two_users`: the two-user closed form ``x_l = b_l / (2 b_h)``, ``x_h = 1 - x_l``
     and unit prices ``2 b_h`` and ``2 b_h^2 / (2 b_h - b_l)`` (footnote 4);
   * :func:`sh_shares_rational`: the same integral in exact rational arithmetic (fractions),
     for tests and worked examples.

2. **Two-user equilibria** (section 6.3, Lemmas 2-3, Theorems 1-2, Table 6.1):
   :func:`two_user_equilibrium` gives bids, shares, unit prices, utilities, revenue and
   efficiency in the complete-information Nash equilibrium; :func:`evaluate` scores any bid
   vector; :func:`best_response` maximises one user's utility numerically (used by the tests to
   check that the closed forms are equilibria of the general rules).

3. **The multi-request online setting** (section 6.4.1): requests ``(r_j, c_j, d_j, v_j)``
   (release second, CPUs wanted per second, duration in seconds, value per CPU per second) on
   ``C`` CPUs. Every second each active request bids ``b_jt`` per CPU and pays ``b_jt c_j``; it
   receives ``x_jt = min(c_j, tau_j * C)`` CPUs, the excess above ``c_j`` is **wasted**, not
   redistributed; a request's duration does not depend on its share. Utility
   ``u_j = v_j sum_t x_jt - sum_t b_jt c_j``. :func:`market_round` is one second,
   :func:`fractional_optimum` the per-second optimum (CPUs to the highest true values, at most
   ``c_j`` each), :class:`MarketPlan` + :func:`simulate` the vectorised per-second loop over
   many runs at once, :class:`ShareMarketPolicy` + :func:`run_on_engine` the same market as a
   policy of the discrete-event engine.

4. **Reservations** (section 6.5): :func:`reservation_round`.

The exact SH integral
---------------------
Let ``a_k = b_k / b_max`` (so ``max a = 1``), ``f(s) = prod_k (1 - s a_k)`` and
``I_j = integral_0^1 prod_{k != j} (1 - s a_k) ds``, so ``x_j = a_j I_j``. The integrand is a
polynomial of degree ``n - 1``. Steps of :func:`sh_shares` (``method="direct"``):

1. take the Gauss-Legendre rule with ``m = ceil(n / 2)`` nodes on ``[0, 1]``: it integrates
   every polynomial of degree ``<= 2m - 1 >= n - 1`` exactly (Gauss's theorem), so the only
   errors are floating-point rounding, not quadrature error;
2. at each node ``s_i`` (all in the open interval, so ``1 - s_i a_j > 0``) compute ``f(s_i)`` as
   a product of positive factors (no cancellation, no logarithms) and
   ``I_j = sum_i w_i f(s_i) / (1 - s_i a_j)``;
3. **provable tail cut**: ``prod_{k != j}(1 - s a_k) <= exp(-s (A - 1))`` with ``A = sum_k a_k``,
   and ``I_j >= 1 / (2A)`` (Weierstrass: ``prod (1 - y_k) >= 1 - sum y_k``), so the nodes with
   ``s_i > s_cut = (ln(2A) + 60 ln 2) / (A - 1)`` together change every ``I_j`` by less than
   ``2^-60`` relative; they are skipped. With many comparable bids (large ``A``) this keeps a
   small fraction of the nodes. (Up to 32 bidders all ``ceil(n/2) <= 16`` nodes are used: the cut
   is not worth computing. Two bidders use the closed form.)

``method="series"`` evaluates the same (cut) quadrature sum without the ``m x n`` matrix: with
``t`` bidders at the top (``a = 1``), ``f(s) = (1 - s)^t h(s)``,
``ln h(s) = -sum_p S_p s^p / p`` with power sums ``S_p`` of the other ``a_k``, and
``I_j = sum_p a_j^p M_p`` with quadrature moments ``M_p = sum_i w_i f(s_i) s_i^p`` (top bidders:
``I_j = sum_i w_i f(s_i) / (1 - s_i)``). Both series have terms of one sign and ratio
``q = (largest node kept) x (largest a below 1)``; they are cut when the remainder is below
``2^-56`` relative. When ``q > 1/2`` (a single bid vector), the bidders above half the top are
taken out of the series instead and multiplied out directly, which makes ``q <= 1/2`` always.
``"auto"`` uses the series for more than 32 bidders when it applies. Work is ``O(n P + m L)``
(``P`` at most about 60 terms, ``L`` large bidders) instead of ``O(n m)``. Both methods are tested
against :func:`sh_shares_rational` and against each other.

Decisions (chapter 6 of the thesis leaves these open)
-----------------------------------------------------
* **Bids enter the rule as totals** ``b_jt c_j`` (``basis="total"``, the default): the money a
  request puts down buys its share, as in the unit model of section 6.2 where the bid is the
  payment. ``basis="per_cpu"`` applies the rule to the per-CPU bids ``b_jt`` (the literal
  ``tau_j(v~_t)``); both agree in the two-user case of equal ``c`` that section 6.4.1 reduces to.
* **Zero bids** are allowed and get a zero share (a factor ``1 - s * 0`` is neutral); an all-zero
  row, a negative or non-finite bid is a ``ValueError``.
* **Rounds happen at whole seconds**: a request released at ``r_j`` with duration ``d_j`` bids
  in seconds ``r_j, ..., r_j + d_j - 1`` and completes at ``r_j + d_j``; release times and
  durations must be whole numbers (SWF gives whole seconds), otherwise ``ValueError`` naming the
  row. A request with duration 0 never bids and completes at once.
* **Efficiency optimum**: per second, a fractional knapsack of the true values (CPUs to the
  highest ``v_j``, at most ``c_j`` each, ``C`` in all); the thesis's "resource allocated
  exclusively to the requests with the highest (true) valuation" (section 6.4.2).
* **Engine use** (:class:`ShareMarketPolicy`): the pool is divisible and every active request
  runs, so the engine's processor count cannot model it. The policy meters everything itself
  and uses the engine for arrivals, the per-second timers, final states and payments; requests
  are started with ``start_metered`` on an engine whose processors are *virtual slots*
  (:func:`run_on_engine` sets the engine capacity to the total CPUs of the workload, the pool
  size ``C`` is the policy's). Payments are charged once, when a request ends.
* **Speed**: the reproduction runs the vectorised loop :func:`simulate` (every run of a batch
  shares the active sets, which depend only on the trace; the per-second work is then a few
  NumPy calls on ``(runs, active)`` arrays). It calls the same :func:`shares` and the same
  bidder objects as the engine policy, and a test checks both give identical results.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache

import numpy as np

RULES = ("ps", "sh")
BASES = ("total", "per_cpu")
_LN2 = math.log(2.0)


# ============================================================================ validation
def _rule(rule: str) -> str:
    r = str(rule).lower()
    if r not in RULES:
        raise ValueError(f"unknown allocation rule {rule!r}; use 'ps' (Proportional Share) or 'sh' (Sanghavi-Hajek)")
    return r


def _bids(bids, where: str) -> np.ndarray:
    b = np.asarray(bids, dtype=np.float64)
    if b.ndim == 0 or b.shape[-1] == 0:
        raise ValueError(f"{where}: need at least one bid (last axis), got shape {b.shape}")
    lo = b.min(axis=-1)  # NaN and inf propagate into min / max: two reductions check everything
    hi = b.max(axis=-1)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise ValueError(f"{where}: bids must be finite, first bad one at index {_first(~np.isfinite(b))}")
    if (lo < 0).any():
        raise ValueError(f"{where}: bids must be >= 0, first negative one at index {_first(b < 0)}")
    if (hi <= 0).any():
        raise ValueError(f"{where}: every bid vector needs a positive bid; "
                         + ("all bids are zero" if hi.ndim == 0 else f"all-zero row at {_first(hi <= 0)}"))
    return b


def _first(mask: np.ndarray):
    i = np.argwhere(mask)[0]
    return tuple(int(k) for k in i) if len(i) > 1 else int(i[0])


# ============================================================================ allocation rules
def ps_shares(bids) -> np.ndarray:
    """Proportional Share (thesis section 6.2.2): ``x_j = b_j / sum_k b_k`` along the last axis.

    Every bidder pays the same unit price ``sum_k b_k`` under pay-as-bid.
    """
    b = _bids(bids, "ps_shares")
    return b / b.sum(axis=-1, keepdims=True)


@cache
def _gauss01(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1] (ascending, read-only, cached per size).

    Tricomi's asymptotic nodes ``(1 - 1/(8m^2) + 1/(8m^3)) cos(pi (4k - 1) / (4m + 2))`` are
    refined by Newton's method on the three-term recurrence in extended precision
    (``np.longdouble``, 80-bit on x86), and the weights computed as
    ``2 / ((1 - x^2) P_m'(x)^2)``, before rounding to float64. This costs ``O(m^2)`` (NumPy's
    ``leggauss`` solves an eigenproblem, ``O(m^3)``) and is more accurate: ``leggauss``'s weights
    are off by up to ~1e-11 relative near the ends for m in the hundreds, which shows as a
    4.7e-12 error in ``sum(x)`` for 1,000 bidders (here ~2e-16).
    """
    if m < 1:
        raise ValueError(f"_gauss01: need at least one node, got {m}")
    k = np.arange(1, m + 1, dtype=np.longdouble)
    pi = np.longdouble(np.pi)
    x = (1 - 1 / (8 * np.longdouble(m) ** 2) + 1 / (8 * np.longdouble(m) ** 3)) * np.cos(pi * (4 * k - 1) / (4 * m + 2))

    def legendre(x):
        p0, p1 = np.ones_like(x), x.copy()
        for i in range(2, m + 1):
            p0, p1 = p1, ((2 * i - 1) * x * p1 - (i - 1) * p0) / i
        return p1, m * (x * p1 - p0) / (x * x - 1)  # P_m(x), P_m'(x)

    for _ in range(6):
        p, dp = legendre(x)
        x = x - p / dp
    _, dp = legendre(x)
    w = 2 / ((1 - x * x) * dp * dp)
    s = ((1 - x) / 2).astype(np.float64)  # x descends, so s ascends
    w = (w / 2).astype(np.float64)
    s.flags.writeable = False
    w.flags.writeable = False
    return s, w


@cache
def _gauss_table(m: int) -> tuple[np.ndarray, np.ndarray]:
    """The Gauss rules with 1, 2, ..., ``m`` nodes, one after the other (the compiled market's table)."""
    s = np.concatenate([_gauss01(k)[0] for k in range(1, m + 1)])
    w = np.concatenate([_gauss01(k)[1] for k in range(1, m + 1)])
    return s, w


def _tail_cut(A: np.ndarray) -> np.ndarray:
    """s_cut per row (see module docstring, step 3); inf where no cut applies (A <= 2)."""
    A = np.asarray(A, dtype=np.float64)
    if A.ndim == 0:
        a = float(A)
        return np.array((math.log(2.0 * a) + 60.0 * _LN2) / (a - 1.0) if a > 2.0 else math.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        cut = (np.log(2.0 * np.maximum(A, 1.0)) + 60.0 * _LN2) / (A - 1.0)
    return np.where(A > 2.0, cut, np.inf)


def sh_shares(bids, method: str = "auto") -> np.ndarray:
    """Sanghavi-Hajek shares (thesis section 6.2.3), exact, along the last axis.

    ``x_j = a_j * integral_0^1 prod_{k != j} (1 - s a_k) ds`` with ``a = b / max(b)``. See the
    module docstring ("The exact SH integral") for the steps and the error bound. ``method``:
    ``"direct"`` (Gauss-Legendre with ``ceil(n/2)`` nodes, products at the nodes), ``"series"``
    (the same quadrature sum through power sums and moments; only where ``s_cut <= 1/2``) or
    ``"auto"`` (series when every row allows it, else direct).

    Properties (tests): shares sum to 1, increase with the own bid, equal the two-user closed
    form and the exact rational value; the lowest bidder pays the highest unit price
    (Corollary 1, appendix D.5).
    """
    b = _bids(bids, "sh_shares")
    if method not in ("auto", "direct", "series"):
        raise ValueError(f"sh_shares: method must be 'auto', 'direct' or 'series', got {method!r}")
    return _sh_core(b, method)


def _sh_core(b: np.ndarray, method: str = "auto") -> np.ndarray:
    """:func:`sh_shares` without the input checks (the market loop's bids are valid by construction)."""
    n = b.shape[-1]
    a = b / b.max(axis=-1, keepdims=True)
    if n == 1:
        return a  # the single (positive) bidder gets everything
    if n == 2:  # closed form, exact in two operations (section 6.2.3)
        lo = np.minimum(a[..., 0], a[..., 1]) / 2.0
        x0 = np.where(a[..., 0] < a[..., 1], lo, 1.0 - lo)
        return np.stack([x0, 1.0 - x0], axis=-1)
    if n <= 32 and method != "series":
        return _sh_direct(a, None)  # at most 16 nodes: the tail cut is not worth computing
    A = a.sum(axis=-1)
    cut = _tail_cut(A)
    plan = _series_plan(a, cut)
    if method == "auto":
        method = "series" if plan is not None else "direct"
    if method == "series":
        if plan is None:
            raise ValueError("sh_shares: method='series' on a batch needs a series ratio <= 1/2 in every row (many "
                             "comparable bids, or one bid at least twice all others); use 'direct' or 'auto'")
        return _sh_series(a, *plan)
    return _sh_direct(a, cut)


def _series_plan(a: np.ndarray, cut: np.ndarray):
    """Nodes, "large" bidders and series ratio for :func:`_sh_series`, or None if it does not apply.

    First try: the large bidders are the top ones (``a = 1``), every other factor has
    ``s_i a_k <= q = (largest node kept) x (largest a below 1)``; used when ``q <= 1/2``. Otherwise
    (one bid vector only) the large bidders are those above half the top, so ``q <= 1/2`` always;
    their factors are multiplied out directly (``O(m L)`` for ``L`` large bidders).
    """
    n = a.shape[-1]
    s, w = _gauss01((n + 1) // 2)
    keep = s <= float(np.max(cut))
    s, w = s[keep], w[keep]
    rho = float(s[-1])
    below = np.where(a < 1.0, a, 0.0)
    q = rho * float(below.max())
    if q <= 0.5:
        return s, w, a >= 1.0, below, q
    if a.ndim == 1:
        large = a > 0.5
        below = np.where(large, 0.0, a)
        return s, w, large, below, rho * float(below.max())
    return None


def _sh_direct(a: np.ndarray, cut: np.ndarray | None) -> np.ndarray:
    n = a.shape[-1]
    s, w = _gauss01((n + 1) // 2)
    if cut is not None:
        keep = s <= np.max(cut)
        if not keep.all():
            s, w = s[keep], w[keep]
    # M[..., i, j] = 1 - s_i a_j, all in (0, 1]
    M = a[..., None, :] * -s[:, None]
    M += 1.0
    f = np.prod(M, axis=-1)  # f(s_i) = prod_k (1 - s_i a_k); positive factors, no cancellation
    g = w * f
    np.reciprocal(M, out=M)
    integral = (g[..., None, :] @ M)[..., 0, :]  # I_j = sum_i g_i / (1 - s_i a_j)
    return a * integral


def _sh_series(a: np.ndarray, s: np.ndarray, w: np.ndarray, large: np.ndarray, below: np.ndarray,
               q: float) -> np.ndarray:
    """The direct method's quadrature sum through power sums and moments (module docstring).

    ``f(s) = prod_{k large} (1 - s a_k) h(s)`` with ``ln h(s) = -sum_p S_p s^p / p``, ``S_p`` the
    power sums of the other ``a``; then ``I_j = sum_p M_p a_j^p`` (moments
    ``M_p = sum_i w_i f(s_i) s_i^p``) for the others and ``I_j = sum_i w_i f(s_i) / (1 - s_i a_j)``
    for the large bidders. Both series have ratio ``<= q`` and are cut at
    ``n q^(P+1) / (1 - q) <= 2^-56``. A batch of bid vectors must have ``large == (a == 1)``.
    """
    shape = a.shape
    n = shape[-1]
    a2 = a.reshape(-1, n)
    b2 = below.reshape(-1, n)
    q = max(q, 1e-300)
    P = max(1, int(math.ceil((56 * _LN2 + math.log(max(n, 2)) - math.log1p(-q)) / -math.log(q))))
    bpow = np.empty((P + 1,) + b2.shape)  # below^p, p = 0..P
    bpow[0] = 1.0
    for p in range(1, P + 1):
        np.multiply(bpow[p - 1], b2, out=bpow[p])
    S = bpow[1:].sum(axis=-1).T  # (R, P): power sums over the bidders that are not large
    spow = np.empty((P, len(s)))  # s_i^p, p = 1..P
    spow[0] = s
    for p in range(1, P):
        np.multiply(spow[p - 1], s, out=spow[p])
    log_h = (S * -(1.0 / np.arange(1, P + 1))) @ spow  # (R, m)
    if a.ndim == 1:
        big = np.flatnonzero(large)
        ML = 1.0 - s[:, None] * a[big]  # (m, L), all in (0, 1]
        with np.errstate(divide="ignore"):
            log_large = np.log(np.prod(ML, axis=1))  # -inf only where f(s_i) underflows anyway
        g = w * np.exp(log_large + log_h)  # (1, m): w_i f(s_i)
    else:
        top = (a2 >= 1.0).sum(axis=-1)  # bidders at the top
        g = w * np.exp(top[:, None] * np.log1p(-s) + log_h)
    mom = np.empty((a2.shape[0], P + 1))  # M_p = sum_i g_i s_i^p
    mom[:, 0] = g.sum(axis=-1)
    mom[:, 1:] = g @ spow.T
    integral = np.matmul(mom[:, None, :], bpow.transpose(1, 0, 2))[:, 0, :]  # sum_p M_p a_j^p
    if a.ndim == 1:
        integral[0, big] = g[0] @ (1.0 / ML)  # large bidders: the quadrature sum itself
    else:
        at_top = (g / (1.0 - s)).sum(axis=-1)
        integral = np.where(a2 >= 1.0, at_top[:, None], integral)
    return (a2 * integral).reshape(shape)


def sh_shares_rational(bids) -> list[Fraction]:
    """SH shares in exact rational arithmetic (one bid vector; for tests and worked examples).

    Steps: ``a_k = b_k / b_max`` as fractions; for each ``j`` expand
    ``prod_{k != j} (1 - s a_k)`` into coefficients ``c_i`` and integrate termwise,
    ``sum_i c_i / (i + 1)``; multiply by ``a_j``. ``O(n^3)`` fraction operations: small ``n`` only.
    """
    vals = [Fraction(x) if not isinstance(x, float) else Fraction(x).limit_denominator(10**12) for x in bids]
    if not vals or any(v < 0 for v in vals) or max(vals) <= 0:
        raise ValueError("sh_shares_rational: need bids >= 0 with at least one positive")
    top = max(vals)
    a = [v / top for v in vals]
    out = []
    for j in range(len(a)):
        coef = [Fraction(1)]
        for k, ak in enumerate(a):
            if k == j:
                continue
            nxt = coef + [Fraction(0)]
            for i in range(len(coef)):
                nxt[i + 1] -= ak * coef[i]
            coef = nxt
        out.append(a[j] * sum(c / (i + 1) for i, c in enumerate(coef)))
    return out


def sh_two_users(b_low: float, b_high: float) -> tuple[float, float, float, float]:
    """Two-user SH closed form (section 6.2.3 and footnote 4), ``b_low <= b_high``.

    Returns ``(x_low, x_high, unit_price_low, unit_price_high)`` =
    ``(b_l / (2 b_h), 1 - b_l / (2 b_h), 2 b_h, 2 b_h^2 / (2 b_h - b_l))``.
    """
    if not (0 < b_low <= b_high) or not math.isfinite(b_high):
        raise ValueError(f"sh_two_users: need 0 < b_low <= b_high, got b_low={b_low!r}, b_high={b_high!r}")
    x_l = b_low / (2.0 * b_high)
    return x_l, 1.0 - x_l, 2.0 * b_high, 2.0 * b_high**2 / (2.0 * b_high - b_low)


def shares(rule: str, bids, method: str = "auto") -> np.ndarray:
    """Shares under ``rule`` ('ps' or 'sh') along the last axis of ``bids``."""
    return ps_shares(bids) if _rule(rule) == "ps" else sh_shares(bids, method=method)


def unit_prices(bids, shares_) -> np.ndarray:
    """Pay-as-bid unit prices ``b_j / x_j`` (inf where a positive bid got nothing, nan for 0/0)."""
    b = np.asarray(bids, dtype=np.float64)
    x = np.asarray(shares_, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return b / x


# ============================================================================ two users (section 6.3)
@dataclass(frozen=True)
class Outcome:
    """Everything section 6.3 reports about one bid profile (Table 6.1's rows)."""

    rule: str
    values: np.ndarray
    bids: np.ndarray
    shares: np.ndarray
    unit_prices: np.ndarray
    utilities: np.ndarray
    revenue: float
    efficiency: float  # sum_j v_j x_j (= user utilities + provider revenue)
    optimum: float  # max_j v_j
    ratio: float  # efficiency / optimum


def evaluate(rule: str, values, bids) -> Outcome:
    """Score bids under ``rule``: shares, unit prices, ``u_j = v_j x_j - b_j``, revenue, efficiency.

    Source: section 6.2.1 (utilities, unit prices, provider's utility = sum of bids) and
    Definition 2 (efficiency ``sum_j x_j v_j``, optimum ``max_j v_j``).
    """
    v = np.asarray(values, dtype=np.float64)
    b = _bids(bids, "evaluate")
    if v.shape != b.shape or v.ndim != 1:
        raise ValueError(f"evaluate: values and bids must be 1-D of equal length, got {v.shape} and {b.shape}")
    x = shares(rule, b)
    eff = float(v @ x)
    opt = float(v.max())
    return Outcome(_rule(rule), v, b, x, unit_prices(b, x), v * x - b, float(b.sum()), eff, opt, eff / opt)


def two_user_equilibrium(v_low: float, v_high: float, rule: str) -> Outcome:
    """The complete-information Nash equilibrium of section 6.3 for ``0 < v_low <= v_high``.

    * SH (Lemma 2): ``b_l = v_l^2 / (2 v_h)``, ``b_h = v_l / 2``; shares ``v_l / (2 v_h)`` and
      ``1 - v_l / (2 v_h)``; utilities 0 and ``v_h - v_l``; revenue ``(v_l^2 + v_l v_h) / (2 v_h)``.
    * PS (Lemma 3): ``b_l = v_l^2 v_h / (v_l + v_h)^2``, ``b_h = v_l v_h^2 / (v_l + v_h)^2``;
      shares ``v / (v_l + v_h)``; revenue ``v_l v_h / (v_l + v_h)``.

    The returned :class:`Outcome` is computed by :func:`evaluate` on these bids, i.e. through the
    general allocation rules, so the closed forms are checked, not copied.
    """
    if not (0 < v_low <= v_high) or not math.isfinite(v_high):
        raise ValueError(f"two_user_equilibrium: need 0 < v_low <= v_high, got {v_low!r}, {v_high!r}")
    r = _rule(rule)
    if r == "sh":
        bids = (v_low**2 / (2.0 * v_high), v_low / 2.0)
    else:
        tot = (v_low + v_high) ** 2
        bids = (v_low**2 * v_high / tot, v_low * v_high**2 / tot)
    return evaluate(r, [v_low, v_high], list(bids))


def best_response(value: float, other_bids, rule: str, *, xatol: float = 1e-12) -> tuple[float, float]:
    """The bid in ``[0, value]`` maximising ``value * x_j - b_j`` against fixed ``other_bids``.

    Bounded scalar search (``scipy.optimize.minimize_scalar``) plus the two end points; the
    utility is concave in the own bid for both rules (section 6.2.1, "smooth"). Returns
    ``(bid, utility)``. Bids above ``value`` never pay under pay-as-bid (``x <= 1``).
    """
    from scipy.optimize import minimize_scalar

    others = np.asarray(other_bids, dtype=np.float64)
    if value <= 0 or not math.isfinite(value):
        raise ValueError(f"best_response: value must be a finite number > 0, got {value!r}")
    if others.ndim != 1 or others.size == 0 or not np.all(others >= 0) or others.max() <= 0:
        raise ValueError("best_response: other_bids must be a non-empty 1-D array >= 0 with a positive bid")
    r = _rule(rule)

    def util(b):
        x = shares(r, np.concatenate([[b], others]))[0]
        return value * x - b

    res = minimize_scalar(lambda b: -util(b), bounds=(0.0, value), method="bounded", options={"xatol": xatol})
    cands = [(float(res.x), util(res.x)), (0.0, util(0.0)), (float(value), util(value))]
    return max(cands, key=lambda t: t[1])


# ============================================================================ one second, many requests
def cpu_allocation(shares_, cpus, capacity: float) -> np.ndarray:
    """``x_j = min(c_j, tau_j C)``: CPUs a request can use; the excess is wasted (section 6.4.1)."""
    return np.minimum(np.asarray(cpus, dtype=np.float64), np.asarray(shares_) * float(capacity))


def market_round(rule: str, bids_per_cpu, cpus, capacity: float, basis: str = "total"):
    """One second of the multi-request market (section 6.4.1): allocation and payments.

    Steps: (1) the rule's input is ``b_j c_j`` (``basis="total"``) or ``b_j``
    (``basis="per_cpu"``); (2) shares ``tau`` by :func:`shares`; (3) ``x_j = min(c_j, tau_j C)``;
    (4) pay-as-bid payments ``b_j c_j``. Works on any leading batch axes. Returns ``(x, pay)``.
    """
    if basis not in BASES:
        raise ValueError(f"market_round: basis must be one of {BASES}, got {basis!r}")
    b = np.asarray(bids_per_cpu, dtype=np.float64)
    c = np.asarray(cpus, dtype=np.float64)
    tau = shares(rule, b * c if basis == "total" else b)
    return cpu_allocation(tau, c, capacity), b * c


def fractional_optimum(values, cpus, capacity: float) -> np.ndarray:
    """Best value per second: CPUs to the highest true values, ``<= c_j`` each, ``C`` in all.

    Works on a batch ``values[..., n]`` with ``cpus[n]``; ties broken by request order.
    """
    v = np.asarray(values, dtype=np.float64)
    c = np.broadcast_to(np.asarray(cpus, dtype=np.float64), v.shape)
    order = np.argsort(-v, axis=-1, kind="stable")
    vs = np.take_along_axis(v, order, -1)
    cs = np.take_along_axis(c, order, -1)
    before = np.cumsum(cs, axis=-1) - cs
    alloc = np.clip(float(capacity) - before, 0.0, cs)
    return (vs * alloc).sum(axis=-1)


# ============================================================================ the online setting
@dataclass
class MarketPlan:
    """Requests of the multi-request setting and their active sets (section 6.4.1).

    ``submit`` (release second ``r_j``), ``runtime`` (``d_j``, seconds) and ``cpus`` (``c_j``) are
    whole numbers; rows in release order. :attr:`segments` lists maximal time intervals
    ``[t0, t1)`` in which the set of active requests (``r_j <= t < r_j + d_j``) is constant and
    not empty, as ``(t0, t1, rows)``. The active sets depend on the trace only (a request's
    duration does not depend on its share), so every run on the same requests shares them.
    """

    submit: np.ndarray
    runtime: np.ndarray
    cpus: np.ndarray
    name: str = "requests"
    segments: list = field(default_factory=list, repr=False)

    @classmethod
    def from_arrays(cls, submit, runtime, cpus, name: str = "requests") -> MarketPlan:
        r = np.asarray(submit, dtype=np.float64)
        d = np.asarray(runtime, dtype=np.float64)
        c = np.asarray(cpus, dtype=np.float64)
        n = r.shape[0]
        for key, arr in (("submit", r), ("runtime", d), ("cpus", c)):
            if arr.ndim != 1 or arr.shape[0] != n:
                raise ValueError(f"MarketPlan: column {key!r} has shape {arr.shape}, expected ({n},)")
            bad = ~np.isfinite(arr) | (arr != np.round(arr))
            if bad.any():
                raise ValueError(f"MarketPlan: {key} must be whole numbers (rounds are whole seconds); row {_first(bad)} is {arr[_first(bad)]!r}")
        if (d < 0).any():
            raise ValueError(f"MarketPlan: runtime must be >= 0; row {_first(d < 0)} is {d[_first(d < 0)]!r}")
        if (c < 1).any():
            raise ValueError(f"MarketPlan: cpus must be >= 1; row {_first(c < 1)} is {c[_first(c < 1)]!r}")
        if n > 1 and (np.diff(r) < 0).any():
            raise ValueError(f"MarketPlan: rows must be in release order; row {_first(np.diff(r) < 0) + 1} is earlier than its predecessor")
        plan = cls(r.astype(np.int64), d.astype(np.int64), c.astype(np.int64), name)
        plan.segments = plan._segments()
        return plan

    @classmethod
    def from_workload(cls, workload) -> MarketPlan:
        """Requests from a :class:`~marketsched.workloads.Workload` (``procs`` = CPUs wanted)."""
        return cls.from_arrays(workload.submit_time, workload.runtime, workload.procs, name=workload.name)

    def __len__(self) -> int:
        return int(self.submit.shape[0])

    def _segments(self) -> list:
        r, d = self.submit, self.runtime
        end = r + d
        live = d > 0
        times = np.unique(np.concatenate([r[live], end[live]]))
        arr_order = np.flatnonzero(live)  # already in release order
        end_order = arr_order[np.argsort(end[arr_order], kind="stable")]
        segs = []
        active: set[int] = set()
        ia = ie = 0
        na = len(arr_order)
        for k in range(len(times) - 1):
            t = times[k]
            while ie < na and end[end_order[ie]] <= t:
                active.discard(int(end_order[ie]))
                ie += 1
            while ia < na and r[arr_order[ia]] <= t:
                active.add(int(arr_order[ia]))
                ia += 1
            if active:
                segs.append((int(t), int(times[k + 1]), np.array(sorted(active), dtype=np.int64)))
        return segs

    def truncated(self, rounds: int) -> MarketPlan:
        """The same requests, cut after the first ``rounds`` bidding rounds (for quick runs).

        Requests that are never active in the cut plan keep their rows (they bid nothing and get
        nothing); :meth:`active_rows` lists the others.
        """
        if isinstance(rounds, bool) or int(rounds) != rounds or rounds < 0:
            raise ValueError(f"MarketPlan.truncated: rounds must be a whole number >= 0, got {rounds!r}")
        segs, total = [], 0
        for t0, t1, rows in self.segments:
            if total >= rounds:
                break
            take = min(t1 - t0, int(rounds) - total)
            segs.append((t0, t0 + take, rows))
            total += take
        return MarketPlan(self.submit, self.runtime, self.cpus, f"{self.name}[:{total} rounds]", segs)

    def active_rows(self) -> np.ndarray:
        """Rows active in at least one segment."""
        if not self.segments:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate([rows for _, _, rows in self.segments]))

    @property
    def rounds(self) -> int:
        """Seconds with at least one active request (bidding rounds)."""
        return int(sum(t1 - t0 for t0, t1, _ in self.segments))

    @property
    def origin(self) -> int:
        return int(self.segments[0][0]) if self.segments else 0

    @property
    def horizon(self) -> int:
        return int(self.segments[-1][1]) if self.segments else 0

    def demand(self) -> np.ndarray:
        """Requested CPUs per second from :attr:`origin` to :attr:`horizon` (0 where idle)."""
        out = np.zeros(self.horizon - self.origin)
        for t0, t1, rows in self.segments:
            out[t0 - self.origin:t1 - self.origin] = self.cpus[rows].sum()
        return out


@dataclass
class MarketResult:
    """Per-run, per-request totals of :func:`simulate` (``B`` runs x ``N`` requests).

    ``received[b, j] = sum_t x_jt`` (CPU-seconds), ``paid[b, j] = sum_t b_jt c_j``. Windows of
    ``window`` seconds from the plan's origin hold the sums behind the thesis's correlation
    criterion (appendix D.2): ``win_pct[b, w]`` = sum over request-seconds of ``b_jt / v_j``,
    ``win_reqsec[w]`` = request-seconds, ``win_demand[w]`` = sum over seconds of requested CPUs,
    ``win_seconds[w]`` = active seconds.
    """

    rules: np.ndarray
    values: np.ndarray
    received: np.ndarray
    paid: np.ndarray
    optimum: np.ndarray
    rounds: int
    window: int
    win_pct: np.ndarray
    win_reqsec: np.ndarray
    win_demand: np.ndarray
    win_seconds: np.ndarray

    @property
    def utility(self) -> np.ndarray:
        """``u_j = v_j sum_t x_jt - sum_t b_jt c_j`` per run and request (section 6.4.1)."""
        return self.values * self.received - self.paid

    @property
    def mean_utility(self) -> np.ndarray:
        """Mean utility per request, per run (Table 6.4)."""
        return self.utility.mean(axis=1)

    @property
    def revenue(self) -> np.ndarray:
        """Provider's revenue = sum of all payments, per run (Table 6.5)."""
        return self.paid.sum(axis=1)

    @property
    def welfare(self) -> np.ndarray:
        return (self.values * self.received).sum(axis=1)

    @property
    def efficiency(self) -> np.ndarray:
        """Welfare / per-second fractional optimum, per run (Table 6.6)."""
        return self.welfare / self.optimum

    def window_series(self) -> tuple[np.ndarray, np.ndarray]:
        """``(mean percentage bid [B, W'], mean requested CPUs [W'])`` over windows with requests."""
        used = self.win_reqsec > 0
        pct = self.win_pct[:, used] / self.win_reqsec[used]
        dem = self.win_demand[used] / self.win_seconds[used]
        return pct, dem

    def spearman(self) -> np.ndarray:
        """Spearman correlation of mean percentage bid and demand per window, per run (D.2)."""
        from scipy.stats import spearmanr

        pct, dem = self.window_series()
        return np.array([spearmanr(p, dem).statistic for p in pct])


def _row_rules(rules, B: int) -> np.ndarray:
    r = np.array([_rule(x) for x in np.broadcast_to(np.asarray(rules, dtype=object), (B,))], dtype=object)
    return r


class _Allocator:
    """Shares for a batch whose rows may use different rules (PS rows and SH rows)."""

    def __init__(self, rules: np.ndarray, basis: str):
        if basis not in BASES:
            raise ValueError(f"simulate: basis must be one of {BASES}, got {basis!r}")
        self.basis = basis
        self.ps = np.flatnonzero(rules == "ps")
        self.sh = np.flatnonzero(rules == "sh")
        self.all_ps = len(self.sh) == 0
        self.all_sh = len(self.ps) == 0

    def __call__(self, bid_input: np.ndarray) -> np.ndarray:
        """``bid_input[..., B, n]`` -> shares of the same shape (bids >= 1 by construction)."""
        if self.all_ps:
            return bid_input / bid_input.sum(axis=-1, keepdims=True)
        if self.all_sh:
            return _sh_core(bid_input)
        tau = np.empty_like(bid_input)
        p = bid_input[..., self.ps, :]
        tau[..., self.ps, :] = p / p.sum(axis=-1, keepdims=True)
        tau[..., self.sh, :] = _sh_core(bid_input[..., self.sh, :])
        return tau


def _generators(seeds, B: int) -> list[np.random.Generator]:
    if isinstance(seeds, np.random.Generator):
        seeds = [seeds]
    seeds = list(seeds)
    if len(seeds) != B:
        raise ValueError(f"simulate: need one seed or Generator per run ({B}), got {len(seeds)}")
    return [s if isinstance(s, np.random.Generator) else np.random.default_rng(s) for s in seeds]


def simulate(
    plan: MarketPlan,
    values,
    rules,
    bidder,
    *,
    capacity: float = 10.0,
    seeds,
    basis: str = "total",
    window: int = 20,
    chunk_elements: int = 1 << 20,
    progress: Callable[[int, int], None] | None = None,
) -> MarketResult:
    """Run ``B`` markets over the same requests, one bidding round per active second (6.4.1).

    Parameters: ``values[B, N]`` true values per CPU per second; ``rules`` one of 'ps'/'sh' or one
    per run; ``bidder`` a bidder from :mod:`marketsched.behaviour.learning` (ZIC, Q-learning);
    ``seeds`` one seed or Generator per run (the bidder's random draws).

    Steps, for each segment of constant active set ``J`` (:attr:`MarketPlan.segments`):

    1. ``bidder.begin(J)``; the per-second optimum (:func:`fractional_optimum`) times the
       segment length;
    2. draw the uniforms of the segment from each run's Generator, ``rng.random((L, |J|))``, in
       chunks of at most ``chunk_elements`` numbers (one uniform per request and second; the
       stream is the same however it is chunked, so :class:`ShareMarketPolicy` reproduces it);
    3. each second: ``bids = bidder.bid(u)`` (per CPU); shares of ``bids * c`` (or ``bids``) under
       each run's rule; ``x = min(c, tau C)``; ``bidder.observe(x, bids)``; add ``x`` and
       ``bids`` to the totals and ``bids / v`` to the window sums. A bidder without state
       (``bidder.stateful`` false, ZIC) gets a whole chunk of seconds at once;
    4. ``bidder.end()``; payments are ``sum_t b_jt c_j``.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[None, :]
    B, N = v.shape
    if N != len(plan):
        raise ValueError(f"simulate: values have {N} columns but the plan has {len(plan)} requests")
    if not np.all(np.isfinite(v)) or (v <= 0).any():
        raise ValueError("simulate: values must be finite and > 0")
    if not (capacity > 0):
        raise ValueError(f"simulate: capacity must be > 0, got {capacity!r}")
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise ValueError(f"simulate: window must be a whole number >= 1, got {window!r}")
    rules = _row_rules(rules, B)
    alloc = _Allocator(rules, basis)
    rngs = _generators(seeds, B)
    C = float(capacity)
    cpus = plan.cpus.astype(np.float64)
    bidder.reset(v, cpus)
    received = np.zeros((B, N))
    bidsum = np.zeros((B, N))
    optimum = np.zeros(B)
    origin = plan.origin
    W = max(1, -(-(plan.horizon - origin) // window))
    win_pct = np.zeros((B, W))
    win_reqsec = np.zeros(W)
    win_demand = np.zeros(W)
    win_seconds = np.zeros(W)
    total = plan.rounds
    done = 0
    stateful = bool(getattr(bidder, "stateful", True))
    per_cpu = basis == "per_cpu"
    for t0, t1, rows in plan.segments:
        n = len(rows)
        c = cpus[rows]
        vv = v[:, rows]
        inv_v = 1.0 / vv
        L = t1 - t0
        optimum += fractional_optimum(vv, c, C) * L
        # window sums that depend on the trace only
        edges = np.arange((t0 - origin) // window, (t1 - 1 - origin) // window + 2) * window + origin
        secs = np.diff(np.clip(edges, t0, t1)).astype(np.float64)
        wsl = slice((t0 - origin) // window, (t1 - 1 - origin) // window + 1)
        win_seconds[wsl] += secs
        win_reqsec[wsl] += secs * n
        win_demand[wsl] += secs * c.sum()
        bidder.begin(rows)
        sx = np.zeros((B, n))
        sb = np.zeros((B, n))
        step = max(1, chunk_elements // max(1, B * n))
        for k0 in range(0, L, step):
            l = min(step, L - k0)
            U = np.stack([g.random((l, n)) for g in rngs], axis=1)  # (l, B, n)
            if stateful:
                xs = np.empty((l, B, n))
                bs = np.empty((l, B, n))
                for k in range(l):
                    bids = bidder.bid(U[k])
                    tau = alloc(bids if per_cpu else bids * c)
                    x = np.minimum(c, tau * C, out=xs[k])
                    bidder.observe(x, bids)
                    bs[k] = bids
                sx += xs.sum(axis=0)
                sb += bs.sum(axis=0)
                pct = (bs * inv_v).sum(axis=-1)
            else:
                bids = bidder.bid(U)
                tau = alloc(bids if per_cpu else bids * c)
                x = np.minimum(c, tau * C)
                sx += x.sum(axis=0)
                sb += bids.sum(axis=0)
                pct = (bids * inv_v).sum(axis=-1)
            # window sums of the percentage bid for seconds t0+k0 .. t0+k0+l-1
            ts = t0 + k0
            first_w = (ts - origin) // window
            starts = np.arange(first_w, (ts + l - 1 - origin) // window + 1) * window + origin
            cuts = np.maximum(starts - ts, 0)
            win_pct[:, first_w:first_w + len(cuts)] += np.add.reduceat(pct, cuts, axis=0).T
            done += l
            if progress is not None:
                progress(done, total)
        bidder.end()
        received[:, rows] += sx
        bidsum[:, rows] += sb
    return MarketResult(
        rules=rules, values=v, received=received, paid=bidsum * cpus, optimum=optimum, rounds=total,
        window=int(window), win_pct=win_pct, win_reqsec=win_reqsec, win_demand=win_demand, win_seconds=win_seconds,
    )


# ============================================================================ engine policy
class ShareMarketPolicy:
    """The multi-request share market as a policy of :class:`marketsched.engine.Simulator`.

    One run (``B = 1``). The engine delivers arrivals and the per-second timers; the policy keeps
    the active set, asks ``bidder`` for bids each second (one uniform per active request from
    ``rng``, in request order, as :func:`simulate` draws them), allocates with the same
    :func:`shares` and meters the CPU-seconds itself. Requests are ``start_metered`` at release
    and ``finish``-ed at ``r_j + d_j``; their payment is charged then (or at ``close``).
    Build it through :func:`run_on_engine`, which sizes the engine's (virtual) processor count.

    Speed: with a bidder without state (``bidder.stateful`` false, ZIC) and ``chunk`` true, the
    seconds until the active set can next change (the next release or end) are bid, allocated
    and metered in one vectorised chunk of at most ``chunk_elements`` numbers, with one timer at
    the chunk's end instead of one per second; the uniforms are drawn in the same order
    (``rng.random((seconds, active))``), so bids and shares are the per-second ones and the totals
    differ only by the order of floating-point additions. Chunks
    run ahead of the engine's clock, so a run cut by ``until`` needs ``chunk=False``
    (:func:`run_on_engine` sees to it).

    Compiled path (``fast`` true, chunked, a :class:`~marketsched.behaviour.learning.ZIC` bidder
    and the kernel ``_share_kernel`` built): the active sets depend on the trace only
    (:attr:`MarketPlan.segments`), so :meth:`bind` runs every round of the whole run at once in C
    on the same uniforms (drawn from ``rng`` in blocks of at most ``chunk_elements`` numbers, in
    the same order), and the engine only sees the arrivals and one timer per end. Bids and
    payments equal the chunked path's bit for bit, the CPU-seconds received up to floating-point
    rounding (see ``_share_kernel.c``). ``fast=False`` or ``MARKETSCHED_ENGINE=python`` runs the
    chunked path, which stays the reference.
    """

    def __init__(self, rule: str, bidder, values, capacity: float = 10.0, rng=0, basis: str = "total",
                 chunk: bool = True, chunk_elements: int = 1 << 20, fast: bool = True, reported=None):
        self.rule = _rule(rule)
        if basis not in BASES:
            raise ValueError(f"ShareMarketPolicy: basis must be one of {BASES}, got {basis!r}")
        self.basis = basis
        self.bidder = bidder
        self.values = np.asarray(values, dtype=np.float64)
        # what the bidders bid from: the values the jobs report (a misreport, e.g. a shaded value
        # under `marketsched audit`), the true ones by default; utilities use the true values
        self.reported = self.values if reported is None else np.asarray(reported, dtype=np.float64)
        self.capacity = float(capacity)
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.alloc = _Allocator(np.array([self.rule], dtype=object), basis)
        self.chunk = bool(chunk) and not bool(getattr(bidder, "stateful", True))
        self.chunk_elements = int(chunk_elements)
        self.fast = bool(fast)
        # processors the engine must offer: virtual slots, one per CPU every request asks for
        # (set by run_on_engine and by the registry; None: the workload's capacity)
        self.engine_capacity: int | None = None

    def bind(self, sim) -> None:
        w = sim.workload
        self.plan = MarketPlan.from_workload(w)  # validates whole seconds
        if self.values.shape != (len(w),):
            raise ValueError(f"ShareMarketPolicy: need one value per request ({len(w)}), got shape {self.values.shape}")
        self.sim = sim
        self.cpus = self.plan.cpus.astype(np.float64)
        self.end_at = (self.plan.submit + self.plan.runtime).tolist()
        self.received = np.zeros(len(w))
        self.bidsum = np.zeros(len(w))
        self.active: list[int] = []
        if self.reported.shape != self.values.shape:
            raise ValueError(f"ShareMarketPolicy: need one reported value per request ({len(w)}), "
                             f"got shape {self.reported.shape}")
        self.bidder.reset(self.reported[None, :], self.cpus)
        self._rows: np.ndarray | None = None  # the active jobs' rows while a bidder segment is open
        self.rounds = 0
        self._next_row = 0  # first row not yet released
        self._ends: list[tuple[int, int]] | None = None  # compiled path: (end, row) of the running jobs
        kern = self._kernel()
        if kern is not None:
            self._run_compiled(kern)
            self._ends = []
            self._timer_set: set[int] = set()

    def _kernel(self):
        from marketsched.behaviour.learning import ZIC
        from marketsched.engine.compiled import kernel

        if not (self.fast and self.chunk and type(self.bidder) is ZIC):
            return None
        return kernel("marketsched.mechanisms.online._share_kernel")

    def _run_compiled(self, kern) -> None:
        """Every round of the run in C, in blocks of at most ``chunk_elements`` uniforms.

        Steps: cut each segment of the plan into pieces of at most ``chunk_elements // n``
        seconds; take consecutive pieces into a block while its draws fit (a larger piece is a
        block alone); draw the block's uniforms with one ``rng.random`` (the stream of the chunked
        path's draws, in the same order) and add its rounds' totals in the kernel.
        """
        lens, ns, offs, rows = [], [], [], []
        off = 0
        for t0, t1, r in self.plan.segments:
            n = len(r)
            rows.append(r)
            per = max(1, self.chunk_elements // n)
            for a in range(t0, t1, per):
                lens.append(min(per, t1 - a))
                ns.append(n)
                offs.append(off)
            off += n
        if not lens:
            return
        plen = np.array(lens, dtype=np.int64)
        pn = np.array(ns, dtype=np.int64)
        poff = np.array(offs, dtype=np.int64)
        rows_cat = np.concatenate(rows).astype(np.int64)
        gs, gw = _gauss_table((int(pn.max()) + 1) // 2)
        draws = np.cumsum(plen * pn)
        top = np.ascontiguousarray(self.bidder.top[0], dtype=np.float64)
        sh, total = self.rule == "sh", self.basis == "total"
        start = 0
        while start < len(plen):
            base = draws[start - 1] if start else 0
            stop = max(start + 1, int(np.searchsorted(draws, base + self.chunk_elements, side="right")))
            u = self.rng.random(int(draws[stop - 1] - base))
            kern.run(u, top, self.cpus, rows_cat, plen[start:stop], pn[start:stop], poff[start:stop], self.capacity,
                     sh, total, gs, gw, self.received, self.bidsum)
            start = stop
        self.rounds = int(plen.sum())

    def _step_compiled(self, t, arrived) -> None:
        sim, ends = self.sim, self._ends
        assert ends is not None
        while ends and ends[0][0] <= t:
            _, j = heapq.heappop(ends)
            sim.charge(j, self.bidsum[j] * self.cpus[j])
            sim.finish(j)
        for j in arrived:
            if self.plan.runtime[j] == 0:
                sim.finish(j)
                continue
            sim.start_metered(j)
            e = self.end_at[j]
            if e not in self._timer_set:
                self._timer_set.add(e)
                sim.wake_at(e)
            heapq.heappush(ends, (e, j))

    def step(self, t, arrived, completed) -> None:
        if self._ends is not None:
            self._step_compiled(t, arrived)
            return
        sim = self.sim
        changed = False
        if self.active:
            still = [j for j in self.active if self.end_at[j] > t]
            if len(still) != len(self.active):
                self._settle()
                for j in self.active:
                    if self.end_at[j] <= t:
                        sim.charge(j, self.bidsum[j] * self.cpus[j])
                        sim.finish(j)
                self.active = still
                changed = True
        if len(arrived):
            self._next_row = arrived.stop
        for j in arrived:
            if self.plan.runtime[j] == 0:
                sim.finish(j)
                continue
            sim.start_metered(j)
            self.active.append(j)
            changed = True
        if not self.active:
            return
        if changed:
            self._settle()
            self._rows = np.array(sorted(self.active), dtype=np.int64)
            self.bidder.begin(self._rows)
            self._sx = np.zeros((1, len(self._rows)))
            self._sb = np.zeros((1, len(self._rows)))
        rows = self._rows
        assert rows is not None, "a segment is open while jobs are active"
        c = self.cpus[rows]
        if self.chunk:
            nxt = min(self.end_at[j] for j in self.active)
            if self._next_row < len(sim.submit):
                nxt = min(nxt, sim.submit[self._next_row])
            seconds = int(max(1, min(nxt - t, self.chunk_elements // len(rows))))
            u = self.rng.random((seconds, 1, len(rows)))  # the per-second draws, in their order
            bids = self.bidder.bid(u)
            tau = self.alloc(bids * c if self.basis == "total" else bids)
            np.multiply(tau, self.capacity, out=tau)  # x = min(c, tau x capacity), in place: no temporaries
            np.minimum(c, tau, out=tau)
            self._sx += tau.sum(axis=0)
            self._sb += bids.sum(axis=0)
            self.rounds += seconds
            sim.wake_at(t + seconds)
            return
        u = self.rng.random((1, len(rows)))
        bids = self.bidder.bid(u)
        tau = self.alloc(bids * c if self.basis == "total" else bids)
        x = np.minimum(c, tau * self.capacity)
        self.bidder.observe(x, bids)
        self._sx += x
        self._sb += bids
        self.rounds += 1
        sim.wake_at(t + 1)

    def _settle(self) -> None:
        """Close the bidder's segment and book the segment's totals."""
        if self._ends is not None:
            return
        if self._rows is not None:
            self.bidder.end()
            self.received[self._rows] += self._sx[0]
            self.bidsum[self._rows] += self._sb[0]
            self._rows = None

    def close(self, t) -> None:
        if self._ends is not None:  # a compiled run is whole: every job ended at its end
            return
        self._settle()
        for j in self.active:  # cut by ``until``: the engine kills them; they pay what they bid
            self.sim.charge(j, self.bidsum[j] * self.cpus[j])

    @property
    def utility(self) -> np.ndarray:
        return self.values * self.received - self.bidsum * self.cpus

    @property
    def revenue(self) -> float:
        return float((self.bidsum * self.cpus).sum())


def run_on_engine(workload, values, rule: str, bidder, *, capacity: float = 10.0, rng=0, basis: str = "total",
                  until: float | None = None):
    """Run the share market through the discrete-event engine; returns ``(records, policy)``.

    The engine's processor count is set to the total CPUs of the workload: its processors are
    virtual slots (every active request runs on a time slice), the pool of ``capacity`` CPUs is
    divided by the policy (see the module docstring, "Engine use").
    """
    from marketsched.engine.simulator import Simulator

    policy = ShareMarketPolicy(rule, bidder, values, capacity=capacity, rng=rng, basis=basis, chunk=until is None)
    policy.engine_capacity = max(1, int(np.asarray(workload.procs).sum()))
    sim = Simulator(workload, policy, capacity=policy.engine_capacity)
    records = sim.run(until=until)
    return records, policy


# ============================================================================ reservations (section 6.5)
@dataclass(frozen=True)
class ReservationOutcome:
    """One pricing round of the reservation extension (section 6.5).

    ``admitted[i]``: reservation ``i`` is served (the others are rejected or queued, by the
    caller's choice, section 6.5.4); ``sh_shares``: shares of the whole resource held by the
    pay-as-bid requests; ``unit_price``: the price per unit share every admitted reservation
    pays; ``res_payments``: ``unit_price * x_i`` (0 if not admitted); ``revenue``: pay-as-bid
    bids plus reservation payments.
    """

    admitted: np.ndarray
    x_res: float
    sh_shares: np.ndarray
    sh_unit_prices: np.ndarray
    unit_price: float
    res_payments: np.ndarray
    revenue: float
    case: str  # "sh" (priced by the SH class), "no_sh" or "no_sh_scarce"


def admit_reservations(requested) -> np.ndarray:
    """First-fit admission in request order: ``x_i`` is admitted if it fits into what is left.

    Section 6.5.4 ("cannot be served since ``x_j > 1 - sum_{k in RES \\ j} x_k``"); the order is a
    decision (earlier requests keep their reservations).
    """
    x = np.asarray(requested, dtype=np.float64)
    if x.ndim != 1 or not np.all(np.isfinite(x)) or np.any((x <= 0) | (x > 1)):
        raise ValueError("admit_reservations: reserved shares must be a 1-D array of numbers in (0, 1]")
    admitted = np.zeros(x.shape, dtype=bool)
    used = 0.0
    for i, xi in enumerate(x):
        if used + xi <= 1.0 + 1e-12:  # tolerance: 0.1 + 0.2 + 0.7 must fit
            admitted[i] = True
            used += float(xi)
    return admitted


def reservation_round(sh_bids, reserved, *, reserve_price: float | None = None, admitted=None) -> ReservationOutcome:
    """Allocate and price one round with pay-as-bid (SH) and reservation (RES) requests.

    Steps (section 6.5.1-6.5.4):

    1. admit reservations first-fit (:func:`admit_reservations`, or the ``admitted`` mask given);
       ``x_RES`` = their total;
    2. the pay-as-bid class shares ``x_SH = 1 - x_RES`` by the SH rule and pays its bids;
    3. each admitted reservation pays the **maximum SH unit price** ``max_k b_k / x_k`` per unit
       share (by Corollary 1 the lowest bidder's);
    4. special cases (6.5.4): without pay-as-bid requests (or with ``x_SH = 0``) reservations pay
       the provider's ``reserve_price`` per unit share, times the scarcity factor
       ``sum_RES x / sum_served x`` when some reservation could not be served.

    Decision: when reservations take the whole resource, pay-as-bid requests get nothing and
    pay nothing that round (they are not served), and the reservations are priced as in the
    no-SH case.
    """
    b = np.asarray(sh_bids, dtype=np.float64).reshape(-1)
    x = np.asarray(reserved, dtype=np.float64).reshape(-1)
    adm = admit_reservations(x) if admitted is None else np.asarray(admitted, dtype=bool)
    if adm.shape != x.shape:
        raise ValueError(f"reservation_round: admitted mask has shape {adm.shape}, reservations {x.shape}")
    x_res = float(x[adm].sum())
    if x_res > 1 + 1e-12:
        raise ValueError(f"reservation_round: admitted reservations hold {x_res} > 1 of the resource")
    x_sh = max(0.0, 1.0 - x_res)
    if b.size and x_sh > 0:
        tau = sh_shares(b) * x_sh
        prices = unit_prices(b, tau)
        price = float(np.max(prices))
        case = "sh"
        sh_revenue = float(b.sum())
    else:
        tau = np.zeros(b.shape)
        prices = np.full(b.shape, np.nan)
        if reserve_price is None or not (reserve_price >= 0):
            raise ValueError("reservation_round: without pay-as-bid requests the provider's reserve_price (>= 0) is needed")
        scarcity = float(x.sum() / x_res) if x_res > 0 else 1.0
        price = float(reserve_price) * scarcity
        case = "no_sh" if adm.all() else "no_sh_scarce"
        sh_revenue = 0.0
    pay = np.where(adm, price * x, 0.0)
    return ReservationOutcome(adm, x_res, tau, prices, price, pay, sh_revenue + float(pay.sum()), case)
