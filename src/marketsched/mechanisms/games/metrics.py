"""Efficiency and fairness of allocations in the fixed-budget game, and the baselines.

Source: Feldman, Lai & Zhang (2005, ACM EC): section 2 (definitions of efficiency,
utility uniformity and envy-freeness), section 3 (social optimum, infinite parallelism),
section 4.2 (Lemma 1: social optimum under finite parallelism is a maximum-weight matching),
section 5.1 (baselines: social optimum and weight-proportional bidding).

* Social welfare U(omega) = sum_i U_i(r_i); efficiency pi = U(omega) / U*.
* Utility uniformity tau = min_i U_i / max_i U_i.
* Envy-freeness rho = min_{i != j} U_i(r_i) / U_i(r_j); envy-free iff rho >= 1.

Decisions (the paper leaves these open): the simulation measures the one equilibrium it reaches,
not the minimum over all equilibria; the envy pairs exclude i = j; a pair with
U_i(r_j) = 0 is skipped (ratio +inf, also for 0/0), U_i(r_i) = 0 < U_i(r_j) gives 0; with
no pair left rho = +inf. Uniformity with every utility 0 is 1 (all equal).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from marketsched.mechanisms.games.fixed_budget import FixedBudgetGame, top_k_sums


def social_optimum(game: FixedBudgetGame) -> tuple[float, np.ndarray]:
    """U* and an optimal allocation (shares matrix).

    Infinite parallelism (section 3): each machine wholly to a user with the largest weight on
    it (lowest index on ties), U* = sum_j max_i w_ij.

    Finite parallelism (section 4.2, Lemma 1): maximum-weight matching in the bipartite graph
    between k_i copies of each user and the machines, edge weight w_ij. Solved with
    ``scipy.optimize.linear_sum_assignment`` (the paper used the Hungarian algorithm) on the
    (sum_i k_i) x n matrix, which may be rectangular; machines may stay unassigned.
    """
    w = game.weights
    r = np.zeros_like(w)
    if not game.finite:
        best = np.argmax(w, axis=0)
        r[best, np.arange(game.n)] = 1.0
        return float(w.max(axis=0).sum()), r
    owner = np.repeat(np.arange(game.m), game.bounds)       # row -> user of each copy
    rows, cols = linear_sum_assignment(w[owner], maximize=True)
    r[owner[rows], cols] = 1.0
    return float(w[owner[rows], cols].sum()), r


def envy_matrix(game: FixedBudgetGame, shares: np.ndarray) -> np.ndarray:
    """E[i, j] = U_i(r_j), user i's utility for user j's bundle (finite parallelism: the sum of
    the k_i largest w_ij r_jl)."""
    w = game.weights
    # einsum, not BLAS matmul: on a loaded 2-core machine the threaded BLAS took ~40 ms for a
    # 150 x 100 x 150 product that einsum does in ~1 ms.
    if not game.finite:
        return np.einsum("ik,jk->ij", w, shares)
    k = game.bounds
    if np.all((shares > 0).sum(axis=1) <= k.min()):              # bundles small enough: plain sum
        return np.einsum("ik,jk->ij", w, shares)
    return np.vstack([top_k_sums(w[i] * shares, np.full(game.m, k[i])) for i in range(game.m)])


def envy_freeness(game: FixedBudgetGame, shares: np.ndarray) -> float:
    """rho = min over i != j of U_i(r_i) / U_i(r_j) with the conventions of the module doc."""
    e = envy_matrix(game, shares)
    own = np.diag(e)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(e > 0, own / np.where(e > 0, e, 1.0), np.inf)
    np.fill_diagonal(ratio, np.inf)
    return float(ratio.min()) if ratio.size else float("inf")


def utility_uniformity(utilities: np.ndarray) -> float:
    """tau = min_i U_i / max_i U_i (1 when every utility is 0)."""
    u = np.asarray(utilities, dtype=float)
    top = u.max()
    return float(u.min() / top) if top > 0 else 1.0


def evaluate(game: FixedBudgetGame, shares: np.ndarray, optimum: float | None = None) -> dict[str, float]:
    """Welfare, efficiency, utility uniformity and envy-freeness of one allocation."""
    u = game.utilities_of(shares)
    best = social_optimum(game)[0] if optimum is None else optimum
    welfare = float(u.sum())
    return {
        "welfare": welfare,
        "efficiency": welfare / best if best > 0 else float("nan"),
        "uniformity": utility_uniformity(u),
        "envy_freeness": envy_freeness(game, shares),
    }
