"""Iterated best-response (or greedy) dynamics of the fixed-budget game, and equilibrium checks.

Source: Feldman, Lai & Zhang (2005, ACM EC), section 5 ("Iterative Method", "Convergence
Criteria").

Steps (section 5):

1. Every user starts from weight-proportional bids, x_ij = X_i w_ij / sum_k w_ik (finite
   parallelism: over its k_i highest-weight machines; a decision, the paper does not say).
2. In each iteration every user updates its bids once: the closed-form best response
   (section 4.1), the local search (section 4.2) under finite parallelism, or one local greedy
   adjustment (section 4.3).
3. Best response: converged when every user's "utility gap" |U_i^t - U_i^(t-1)| is below
   eps = 0.001 after a full iteration. Greedy: converged when every user's relative marginal
   utility gap (g_max - g_min) / g_max is below ``marginal_tol``.
4. "Social welfare stabilization" (the system view, individual users may still move): the
   first iteration t after which the efficiency stays within ``stabilise_tol`` = 0.01 of its
   value at t for the rest of the run (decision: the paper's "change in social welfare
   <= eps" read per iteration is met at once by the small greedy steps, so it is read over
   the rest of the run instead, and relative to U* so it does not grow with m).
5. Stop at convergence or after 200 iterations ("a convergence time of 200 iterations
   indicates non-convergence"), reporting the state at the stop.

Decisions (the paper leaves them open):

* Update order: **sequential** by default (Gauss-Seidel: users update one after the other in
  index order, each seeing the latest bids); ``order="simultaneous"`` (Jacobi: everybody
  answers the previous iteration's bids, vectorised) is available. Runs made while planning this project showed
  numerically that sequential updates reproduce the paper's numbers, while undamped
  simultaneous best responses oscillate (every user rushes to the same cheap machines;
  efficiency falls to 0.01-0.5 and nothing converges in 200 iterations).
* One iteration = one update of every user.
* ``damping`` d (default 0, the paper's plain best response): a user moves only part of the way,
  x_i <- d x_i + (1 - d) BR_i (damping 0.2-0.5 partly rescues simultaneous updates, see tests/test_fixed_budget.py;
  it also helps sequential updates out of the 2-cycles two-player games can fall into).
  Infinite parallelism only (a mix of two k-machine bids may use more than k machines).
* The greedy step is ``greedy_step`` = 1% of the user's budget and the marginal gap threshold
  ``marginal_tol`` = 5% (the paper gives neither).
* The empty-machine case: the game's ``reserve`` (appendix A); with reserve 0 a machine left
  with no other bid raises ValueError (no best response exists).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from marketsched.mechanisms.games.best_response import (
    br_one,
    br_rows,
    local_search_one,
    response_utility,
)
from marketsched.mechanisms.games.best_response import (
    greedy_step as _greedy_step,
)
from marketsched.mechanisms.games.fixed_budget import FixedBudgetGame, shares_of, top_k_sums, weight_proportional_bids
from marketsched.mechanisms.games.metrics import envy_freeness, social_optimum, utility_uniformity

METHODS = ("best_response", "greedy")
ORDERS = ("sequential", "simultaneous")


@dataclass
class DynamicsResult:
    """Outcome of ``run_dynamics``. Traces have one entry per iteration, index 0 = the start."""

    bids: np.ndarray
    converged: bool
    iterations: int                 # iterations run (the cap when not converged)
    stabilised_at: int              # first iteration after which efficiency stays within stabilise_tol
    welfare: np.ndarray
    efficiency: np.ndarray
    uniformity: np.ndarray
    envy_freeness: np.ndarray
    utilities: np.ndarray           # final U_i
    optimum: float
    swaps: list[int] = field(default_factory=list)   # local-search swaps per call (finite model)


def _others(Y: np.ndarray, xi: np.ndarray, w: np.ndarray, reserve: float, total: float, user: int) -> np.ndarray:
    """Other users' bids plus reserve, seen by one user; refuses an empty machine without reserve."""
    y = Y - xi
    if reserve > 0:
        return np.maximum(y, reserve)
    y = np.where(y > 1e-12 * total, y, 0.0)
    empty = (y == 0) & (w > 0)
    if empty.any():
        raise ValueError(
            f"user {user} is alone on machine {int(np.flatnonzero(empty)[0])} with reserve 0: no best response "
            "exists (section 2); give the game a reserve > 0 (appendix A)")
    return y


def _measure(game: FixedBudgetGame, x: np.ndarray, optimum: float) -> tuple[np.ndarray, float, float, float]:
    r = shares_of(x, game.reserve)
    u = top_k_sums(game.weights * r, game.parallelism if game.finite else None)
    return u, float(u.sum() / optimum) if optimum > 0 else float("nan"), utility_uniformity(u), envy_freeness(game, r)


def run_dynamics(game: FixedBudgetGame, method: str = "best_response", order: str = "sequential",
                 tol: float = 1e-3, max_iterations: int = 200, initial: np.ndarray | None = None,
                 greedy_step: float = 0.01, marginal_tol: float = 0.05,
                 utility: Callable[[int, np.ndarray], np.ndarray] | None = None,
                 stabilise_tol: float = 0.01, damping: float = 0.0) -> DynamicsResult:
    """Run the section 5 dynamics (steps and decisions in the module doc).

    method: "best_response" (section 4.1, or the local search of 4.2 under finite parallelism)
    or "greedy" (section 4.3, infinite parallelism only). order: "sequential" (default) or
    "simultaneous". tol: the utility-gap eps (0.001 in the paper). initial: starting bids
    (default weight-proportional). greedy_step: money moved per greedy step, as a fraction of
    the user's budget. utility: for greedy, an optional black-box utility ``utility(i, shares)``
    mapping a (b, n) array of user i's share vectors to (b,) values (default: linear).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be positive, got {tol}")
    if int(max_iterations) != max_iterations or max_iterations < 1:
        raise ValueError(f"max_iterations must be an integer >= 1, got {max_iterations}")
    if not 0 <= damping < 1 or (damping > 0 and (game.finite or method != "best_response")):
        raise ValueError(f"damping must lie in [0, 1) and is for best response without a parallelism bound, got {damping}")
    if method == "greedy" and game.finite:
        raise ValueError("greedy adjustment (section 4.3) is defined here for infinite parallelism only")
    if not (0 < greedy_step <= 1) or not (0 <= marginal_tol < 1):
        raise ValueError(f"need 0 < greedy_step <= 1 and 0 <= marginal_tol < 1, got {greedy_step}, {marginal_tol}")
    x = weight_proportional_bids(game) if initial is None else game.check_bids(initial).copy()
    w, budgets, reserve = game.weights, game.budgets, game.reserve
    total = float(budgets.sum())
    m = game.m
    k = game.parallelism if game.finite else None
    optimum = social_optimum(game)[0]
    swaps: list[int] = []

    def respond(i: int, y: np.ndarray, xi: np.ndarray) -> tuple[np.ndarray, float]:
        if method == "greedy":
            u = None if utility is None else (lambda r, i=i: utility(i, r))
            return _greedy_step(w[i], xi, y, greedy_step * budgets[i], u, marginal_tol)
        if k is not None:
            new, s = local_search_one(w[i], y, budgets[i], int(k[i]))
            swaps.append(s)
            return new, 0.0
        new = br_one(w[i], y, budgets[i])
        return (new if damping == 0 else damping * xi + (1 - damping) * new), 0.0

    u, eff, uni, env = _measure(game, x, optimum)
    trace = [(float(u.sum()), eff, uni, env)]
    converged, it = False, 0
    for it in range(1, int(max_iterations) + 1):
        gaps = np.zeros(m)
        if order == "sequential":
            Y = x.sum(axis=0) + reserve
            for i in range(m):
                y = _others(Y, x[i], w[i], reserve, total, i)
                new, gaps[i] = respond(i, y, x[i])
                Y = y + new
                x[i] = new
        else:
            Y = x.sum(axis=0) + reserve
            ys = np.vstack([_others(Y, x[i], w[i], reserve, total, i) for i in range(m)]) if reserve == 0 \
                else np.maximum(Y[None, :] - x, reserve)
            if method == "best_response" and k is None:
                x = br_rows(w, ys, budgets) if damping == 0 else damping * x + (1 - damping) * br_rows(w, ys, budgets)
            else:
                pairs = [respond(i, ys[i], x[i]) for i in range(m)]
                x = np.vstack([p[0] for p in pairs])
                gaps = np.array([p[1] for p in pairs])
        new_u, eff, uni, env = _measure(game, x, optimum)
        trace.append((float(new_u.sum()), eff, uni, env))
        if method == "greedy":
            done = bool(np.all(gaps <= marginal_tol))
        else:
            done = bool(np.max(np.abs(new_u - u)) < tol)
        u = new_u
        if done:
            converged = True
            break
    arr = np.array(trace)
    return DynamicsResult(x, converged, it, stabilisation_time(arr[:, 1], stabilise_tol), arr[:, 0], arr[:, 1],
                          arr[:, 2], arr[:, 3], u, optimum, swaps)


def stabilisation_time(series: np.ndarray, tol: float) -> int:
    """First index t with |series[s] - series[t]| <= tol for every later s."""
    v = np.asarray(series, dtype=float)
    hi = np.maximum.accumulate(v[::-1])[::-1]
    lo = np.minimum.accumulate(v[::-1])[::-1]
    ok = (hi - v <= tol) & (v - lo <= tol)
    return int(np.argmax(ok))


def regrets(game: FixedBudgetGame, bids) -> np.ndarray:
    """Per user: utility of its best response to the others minus its current utility.

    Infinite parallelism: the exact closed form (section 4.1), all users at once; an
    equilibrium has every regret ~ 0. Finite parallelism: the local search (section 4.2), a
    heuristic, so a zero regret means "no improving local-search answer".
    """
    x = game.check_bids(bids)
    w, reserve = game.weights, game.reserve
    Y = x.sum(axis=0) + reserve
    total = float(game.budgets.sum())
    ys = np.vstack([_others(Y, x[i], w[i], reserve, total, i) for i in range(game.m)])
    current = response_utility(w, x, ys) if not game.finite else \
        top_k_sums(w * np.where(x > 0, x / (x + ys), 0.0), game.parallelism)
    if game.finite:
        best = np.array([
            response_utility(w[i], local_search_one(w[i], ys[i], game.budgets[i], int(game.bounds[i]))[0], ys[i])
            for i in range(game.m)])
    else:
        best = response_utility(w, br_rows(w, ys, game.budgets), ys)
    return best - current


def is_equilibrium(game: FixedBudgetGame, bids, tol: float = 1e-9) -> bool:
    """True when no user can gain more than ``tol`` by its best response (infinite parallelism:
    a Nash equilibrium up to tol; finite: a local-search equilibrium)."""
    return bool(np.all(regrets(game, bids) <= tol))
