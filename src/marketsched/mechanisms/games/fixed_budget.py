"""The fixed-budget proportional-share game (Tycoon).

Source: Feldman, Lai & Zhang (2005), "A Price-Anticipating Resource Allocation Mechanism
for Distributed Shared Clusters" (ACM EC 2005), section 2 ("The model"), with the perturbed
game Q^eps of appendix A.

The game, step by step (section 2):

1. m users, n divisible machines. User i has a budget X_i and private weights w_ij >= 0.
2. User i bids x_ij >= 0 on machine j and must spend its whole budget: sum_j x_ij = X_i.
3. The price of machine j is Y_j = sum_i x_ij; user i receives the share r_ij = x_ij / Y_j
   (nobody is allocated a machine with Y_j = 0).
4. Infinite parallelism: U_i = sum_j w_ij r_ij. Finite parallelism (bound k_i, the paper's
   Delta in section 5.2): U_i is the sum of the k_i largest w_ij r_ij and the user bids on at
   most k_i machines.

Decision taken here (the paper leaves it open): the *reserve* bid. With
``reserve = eps > 0`` the game is the paper's own perturbed game Q^eps of appendix A,
r_ij = x_ij / (eps + Y_j): the host holds a reserve bid eps that is never allocated to
anybody. Without it a machine nobody else bids on has no best response (bidding any
positive amount takes the whole machine, and there is no smallest positive amount), which
the dynamics do meet (a machine emptied during the run, or m * k < n under finite
parallelism). The simulation instances use ``DEFAULT_RESERVE = 1e-6`` (in units of the
budget, which is 1); the analytic examples of section 3 use ``reserve = 0``.

Budgets X_i = 1 and weights normalised to sum 1 per user are the paper's normalisation for
all its analysis (section 3); the instance generators apply it ("normalized thereafter",
section 5.1; runs made while planning this project showed that the correlated weights must be normalised
too to reproduce the paper's fairness numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_RESERVE = 1e-6


def _as_matrix(name: str, value, shape: tuple[int, int] | None = None) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (users x machines) array, got shape {arr.shape}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"{name} has a non-finite entry at user {i}, machine {j}: {arr[i, j]}")
    neg = arr < 0
    if neg.any():
        i, j = np.argwhere(neg)[0]
        raise ValueError(f"{name} has a negative entry at user {i}, machine {j}: {arr[i, j]}")
    return arr


def _as_vector(name: str, value, length: int, positive: bool = True) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(length, float(arr))
    if arr.shape != (length,):
        raise ValueError(f"{name} must have shape ({length},), got {arr.shape}")
    bad = ~np.isfinite(arr) | ((arr <= 0) if positive else (arr < 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        kind = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be finite and {kind}; entry {i} is {arr[i]}")
    return arr


@dataclass(frozen=True)
class FixedBudgetGame:
    """A fixed-budget proportional-share game (Feldman, Lai & Zhang 2005, section 2; appendix A
for ``reserve``).

    weights:      (m, n) preference weights w_ij >= 0.
    budgets:      (m,) budgets X_i > 0 (a scalar is broadcast).
    parallelism:  None for the infinite-parallelism model, else (m,) bounds k_i >= 1 (a scalar
                  is broadcast); a bound >= n is the same as infinite parallelism.
    reserve:      the host reserve bid eps >= 0 of the perturbed game Q^eps (see module doc).
    """

    weights: np.ndarray
    budgets: np.ndarray
    parallelism: np.ndarray | None = None
    reserve: float = DEFAULT_RESERVE

    def __post_init__(self):
        w = _as_matrix("weights", self.weights)
        m, n = w.shape
        if m < 1 or n < 1:
            raise ValueError(f"weights must have at least one user and one machine, got shape {w.shape}")
        object.__setattr__(self, "weights", w)
        object.__setattr__(self, "budgets", _as_vector("budgets", self.budgets, m))
        if self.parallelism is not None:
            k = np.asarray(self.parallelism)
            if k.ndim == 0:
                k = np.full(m, k)
            if k.shape != (m,) or not np.all(np.isfinite(k.astype(float))) or np.any(k != np.round(k)) or np.any(k < 1):
                raise ValueError(f"parallelism must be integers >= 1, one per user ({m}), got {self.parallelism!r}")
            object.__setattr__(self, "parallelism", np.minimum(k.astype(np.int64), n))
        r = float(self.reserve)
        if not np.isfinite(r) or r < 0:
            raise ValueError(f"reserve must be finite and >= 0, got {self.reserve}")
        object.__setattr__(self, "reserve", r)

    @property
    def m(self) -> int:
        return self.weights.shape[0]

    @property
    def n(self) -> int:
        return self.weights.shape[1]

    @property
    def bounds(self) -> np.ndarray:
        """(m,) parallelism bounds k_i; n for every user when there is none (a bound >= n is no bound)."""
        return np.full(self.m, self.n, np.int64) if self.parallelism is None else self.parallelism

    @property
    def finite(self) -> bool:
        """True when some user's parallelism bound is below n (otherwise the infinite model)."""
        return self.parallelism is not None and bool(np.any(self.parallelism < self.n))

    def check_bids(self, bids) -> np.ndarray:
        """Validate a bid matrix: shape (m, n), finite, >= 0, each row spends its budget, at
        most k_i positive bids under finite parallelism. Returns it as a float array."""
        x = _as_matrix("bids", bids, (self.m, self.n))
        spent = x.sum(axis=1)
        off = ~np.isclose(spent, self.budgets, rtol=1e-9, atol=1e-12)
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise ValueError(f"bids of user {i} sum to {spent[i]}, not its budget {self.budgets[i]} (fixed budget, section 2)")
        if self.finite:
            count = (x > 0).sum(axis=1)
            over = count > self.bounds
            if over.any():
                i = int(np.flatnonzero(over)[0])
                raise ValueError(f"user {i} bids on {count[i]} machines, above its parallelism bound {self.bounds[i]}")
        return x

    def shares(self, bids) -> np.ndarray:
        """r_ij = x_ij / (eps + Y_j); a machine with no bid and eps = 0 is allocated to nobody."""
        x = self.check_bids(bids)
        return shares_of(x, self.reserve)

    def utilities(self, bids) -> np.ndarray:
        """U_i for every user at a bid profile (finite parallelism: sum of the k_i largest w_ij r_ij)."""
        return self.utilities_of(self.shares(bids))

    def utilities_of(self, shares) -> np.ndarray:
        """U_i of an allocation (shares) matrix, without bids (used for the baselines too)."""
        r = _as_matrix("shares", shares, (self.m, self.n))
        return top_k_sums(self.weights * r, self.parallelism if self.finite else None)


def shares_of(bids: np.ndarray, reserve: float) -> np.ndarray:
    """Proportional shares x_ij / (reserve + Y_j), 0 on machines without any bid (no checks)."""
    total = bids.sum(axis=0) + reserve
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(total > 0, bids / np.where(total > 0, total, 1.0), 0.0)
    return r


def top_k_sums(values: np.ndarray, k: np.ndarray | None) -> np.ndarray:
    """Row sums of the k_i largest entries of each row (all of them when k is None)."""
    if k is None:
        return values.sum(axis=1)
    n = values.shape[1]
    desc = -np.sort(-values, axis=1)
    mask = np.arange(n)[None, :] < np.asarray(k)[:, None]
    return np.where(mask, desc, 0.0).sum(axis=1)


# ----------------------------------------------------------------------------------------
# Instances (section 3.1, section 3.2, section 5.1)
# ----------------------------------------------------------------------------------------


def _normalise_rows(w: np.ndarray) -> np.ndarray:
    s = w.sum(axis=1, keepdims=True)
    if np.any(s <= 0):
        raise ValueError("every user needs a positive weight somewhere to normalise its weights")
    return w / s


def uniform_game(m: int, n: int, rng: np.random.Generator, parallelism=None,
                 reserve: float = DEFAULT_RESERVE) -> FixedBudgetGame:
    """Uniform preferences (section 5.1): w_ij i.i.d. U(0, 1), normalised per user; X_i = 1."""
    w = _normalise_rows(rng.random((m, n)))
    return FixedBudgetGame(w, np.ones(m), parallelism, reserve)


def correlated_game(m: int, n: int, rng: np.random.Generator, dims: int = 3, parallelism=None,
                    reserve: float = DEFAULT_RESERVE) -> FixedBudgetGame:
    """Correlated preferences (section 5.1): w_ij = p_i . q_j with ``dims`` = 3 resource
    profiles of i.i.d. U(0, 1) entries, normalised per user (checked numerically while planning this project:
    normalising reproduces the paper; raw weights give far lower utility uniformity); X_i = 1."""
    p = rng.random((m, dims))
    q = rng.random((n, dims))
    return FixedBudgetGame(_normalise_rows(p @ q.T), np.ones(m), parallelism, reserve)


def equal_weight_game(alpha: float) -> FixedBudgetGame:
    """Figure 1(a): both users weigh the machines (alpha, 1 - alpha); budgets 1, no reserve."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    w = np.array([[alpha, 1 - alpha], [alpha, 1 - alpha]])
    return FixedBudgetGame(w, np.ones(2), None, 0.0)


def opposite_weight_game(alpha: float) -> FixedBudgetGame:
    """Figure 1(b): weights (alpha, 1 - alpha) and (1 - alpha, alpha); budgets 1, no reserve."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    w = np.array([[alpha, 1 - alpha], [1 - alpha, alpha]])
    return FixedBudgetGame(w, np.ones(2), None, 0.0)


def opposite_equilibria(alpha: float) -> list[tuple[float, np.ndarray]]:
    """Every equilibrium of the opposite-weight game (section 3.1): (delta, bids) per nonnegative root.

    The roots of f(delta) = delta^3 - c delta^2 + c delta - 1, c = 1/(2 alpha (1 - alpha)) - 1,
    smallest first; the bids are appendix B's with beta = 1 - alpha (the printed closed forms for x
    and y are wrong, so they are re-derived from the appendix's own equations): user 1 bids x = 1/(1 + delta^2 (1 - alpha)/alpha) on machine 1,
    user 2 bids y = 1/(1 + delta^2 alpha/(1 - alpha)). delta = 1 is the symmetric equilibrium.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    c = 1 / (2 * alpha * (1 - alpha)) - 1
    roots = np.roots([1, -c, c, -1])
    out = []
    for d in sorted(r.real for r in roots if abs(r.imag) < 1e-9 and r.real >= 0):
        x = 1 / (1 + d * d * (1 - alpha) / alpha)
        y = 1 / (1 + d * d * alpha / (1 - alpha))
        out.append((float(d), np.array([[x, 1 - x], [y, 1 - y]])))
    return out


def worst_case_game(n: int) -> tuple[FixedBudgetGame, np.ndarray]:
    """The m = n^2 + n instance of section 3.2 and its equilibrium bids.

    n^2 "flat" users weigh every machine 1/n and split their budget evenly; n "specialists"
    weigh only their own machine (weight 1) and bid everything on it. Every Y_j = n + 1, the
    welfare is 2n/(n+1) while U* = n. Returns (game, equilibrium bids); no reserve.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    flat = np.full((n * n, n), 1.0 / n)
    special = np.eye(n)
    w = np.vstack([flat, special])
    bids = np.vstack([np.full((n * n, n), 1.0 / n), np.eye(n)])
    return FixedBudgetGame(w, np.ones(n * n + n), None, 0.0), bids


def weight_proportional_bids(game: FixedBudgetGame) -> np.ndarray:
    """Baseline and starting point of the dynamics (section 5): x_ij = X_i w_ij / sum_k w_ik.

    Under finite parallelism (a decision, the paper does not say): proportional to the weights of the
    user's k_i highest-weight machines only (ties broken by machine index). A user with all
    weights zero splits evenly (appendix A's convention), over its first k_i machines if bounded.
    """
    w = game.weights
    if game.finite:
        order = np.argsort(-w, axis=1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(game.n)[None, :].repeat(game.m, 0), axis=1)
        keep = rank < game.bounds[:, None]
        w = np.where(keep, w, 0.0)
    else:
        keep = np.ones_like(w, dtype=bool)
    s = w.sum(axis=1, keepdims=True)
    even = keep / keep.sum(axis=1, keepdims=True)
    prop = np.where(s > 0, w / np.where(s > 0, s, 1.0), even)
    return prop * game.budgets[:, None]
