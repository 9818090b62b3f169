"""Random Egg markets for property tests, audits and benchmarks.

A random market has ``K`` providers with random bucket edges, random admissible price tables
(rule 1 by a running maximum along every resource axis; some cells not offered), random
monotone linear estimators (optionally one categorical attribute selecting a per-group
model) and a static reliability per provider. :func:`evolve` then moves it forward in time
through a random sequence of *admissible* price updates (providers' wishes projected on the
admissible set, plus raw wishes the infrastructure may reject) and *dominating* estimator
installations: the history theorem 1 allows ("regardless of the reports of other users":
other users act on a user only through the providers' tables).

All randomness comes from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import numpy as np

from marketsched.mechanisms.online.egg.beliefs import random_schedule
from marketsched.mechanisms.online.egg.bids import JobType
from marketsched.mechanisms.online.egg.escrow import StaticReliability
from marketsched.mechanisms.online.egg.estimators import (
    EstimatorStore,
    EstimatorUpdateError,
    GroupedLinearEstimator,
    LinearEstimator,
)
from marketsched.mechanisms.online.egg.market import Market
from marketsched.mechanisms.online.egg.price_table import AdmissibilityError, PriceBook


def random_tables(rng: np.random.Generator, shape: tuple[int, ...], p_inf: float = 0.1, scale: float = 15.0):
    """Random tables ``(K, n_1..n_L, H)`` non-decreasing along every resource axis."""
    t = rng.uniform(0.0, scale, shape) * rng.uniform(0.2, 1.0, shape[:1] + (1,) * (len(shape) - 1))
    t[rng.random(shape) < p_inf] = np.inf
    for axis in range(1, len(shape) - 1):
        np.maximum.accumulate(t, axis=axis, out=t)
    return t


def _random_linear(rng, n_res: int, n_attr: int, cat: np.ndarray, runtime_scale: float) -> LinearEstimator:
    b = rng.uniform(0.0, 1.0, n_res)
    W = rng.uniform(0.0, 1.0, (n_res, n_attr)) * (rng.random((n_res, n_attr)) < 0.7)
    W[:, cat] = 0.0
    b[0] *= runtime_scale
    W[0] *= runtime_scale
    return LinearEstimator(b, W, cat)


def random_market(rng: np.random.Generator, n_providers: int = 3, n_resources: int = 2, n_buckets: int = 3,
                  delta: float = 3.0, extra_columns: int = 3, slot: float = 1.0, n_attributes: int = 2,
                  categorical: bool = False, start: float = 0.0, p_inf: float = 0.1,
                  runtime_scale: float = 0.5) -> tuple[Market, np.ndarray]:
    """A random market and the categorical mask of its descriptions.

    Resource 0 is the run time (in the same unit as ``slot``). ``extra_columns`` slots beyond
    ``Delta`` keep new columns outside the locked window.
    """
    K, L = int(n_providers), int(n_resources)
    A = int(n_attributes) + (1 if categorical else 0)
    cat = np.zeros(A, bool)
    if categorical:
        cat[-1] = True
    H = int(np.ceil(delta / slot)) + int(extra_columns)
    edges = []
    for _ in range(L):
        widths = rng.uniform(0.2, 1.5, (K, n_buckets))
        edges.append(np.concatenate([np.zeros((K, 1)), np.cumsum(widths, axis=1)], axis=1))
    book = PriceBook(K, edges, slot, delta, H, start, random_tables(rng, (K, *([n_buckets] * L), H), p_inf))
    models: list[LinearEstimator | GroupedLinearEstimator] = []
    for _ in range(K):
        if categorical and rng.random() < 0.5:
            groups = {float(g): _random_linear(rng, L, A, cat, runtime_scale) for g in range(2)}
            models.append(GroupedLinearEstimator(A - 1, groups, _random_linear(rng, L, A, cat, runtime_scale)))
        else:
            models.append(_random_linear(rng, L, A, cat, runtime_scale))
    est = EstimatorStore(models, delta, runtime_dim=0)
    rel = StaticReliability(rng.uniform(0.0, 1.0, K))
    return Market(book, est, rel), cat


def random_job(rng: np.random.Generator, market: Market, cat: np.ndarray, arrival: float | None = None,
               scale: float = 20.0) -> JobType:
    """A random true type arriving at ``arrival`` (default: the market's clock) with patience ``<= Delta``."""
    a = market.now if arrival is None else float(arrival)
    A = int(cat.shape[0])
    x = rng.uniform(0.0, 2.0, A) * (rng.random(A) < 0.8)
    x[cat] = rng.integers(0, 3, cat.sum())
    w = random_schedule(rng, a, a + market.delta, scale)
    g = float(rng.choice([0.0, rng.uniform(0.0, 1.0)]))
    return JobType(x, w, a, g)


def _dominating(rng, model):
    """A model >= ``model`` everywhere (scaled-up parameters): installable without inactivity."""
    if isinstance(model, LinearEstimator):
        return LinearEstimator(model.intercept * rng.uniform(1.0, 1.5, model.intercept.shape) + rng.uniform(0, 0.1),
                               model.weights * rng.uniform(1.0, 1.5, model.weights.shape), model.categorical)
    groups = {g: _dominating(rng, m) for g, m in model.models.items()}
    return GroupedLinearEstimator(model.group_attr, groups, _dominating(rng, model.default))


def evolve(market: Market, rng: np.random.Generator, until: float, n_events: int = 4, p_raw: float = 0.3) -> dict:
    """Move ``market`` to time ``until`` through random admissible provider actions.

    Each event, at a random time in ``(now, until]``: a provider wishes a new table (current
    prices times a random factor in [0.3, 2], new columns priced fresh); with probability
    ``p_raw`` it submits the wish as is (the infrastructure may reject it), otherwise its
    projection on the admissible set (always accepted); or it installs a dominating
    estimator. Returns counts of accepted and rejected updates.
    """
    times = np.sort(rng.uniform(market.now, until, n_events))
    counts = {"accepted": 0, "rejected": 0, "estimators": 0}
    K = market.n_providers
    for t in times:
        market.advance(float(t))
        k = int(rng.integers(0, K))
        if rng.random() < 0.25:
            try:  # refused while a provider waits for a model from an inactive period
                market.install_estimator(k, _dominating(rng, market.estimators.models[k]))
                counts["estimators"] += 1
            except EstimatorUpdateError:
                counts["refused_estimators"] = counts.get("refused_estimators", 0) + 1
            continue
        cur = market.book.prices[k]
        fresh = random_tables(rng, (1, *cur.shape), p_inf=0.05)[0]
        wish = np.where(np.isfinite(cur), cur * rng.uniform(0.3, 2.0, cur.shape), fresh)
        for axis in range(cur.ndim - 1):
            np.maximum.accumulate(wish, axis=axis, out=wish)
        if rng.random() >= p_raw:
            wish = market.book.project(k, wish, market.now)
        try:
            market.update_prices(k, wish)
            counts["accepted"] += 1
        except AdmissibilityError:
            counts["rejected"] += 1
    market.advance(float(until))
    return counts
