"""Job value (weight) models: the true, private value w_i each job's owner holds.

- :func:`bimodal`: 80% N(30, 15) and 20% N(150, 15). Source: Shudler et al. (2010), section II.A, Fig. 1
  (after Chun & Culler), "less important" and "more important" jobs; Stößer (2009), section 5.5.1
  uses the same mix, footnote 6: "negative valuations were cut off".
- :func:`bimodal_clipped` (model ``"bimodal-clip"``): the same with draws below 0 set to 0.
- :func:`bimodal_from_one` (model ``"bimodal-1"``): the same with draws below 1 redrawn, so that
  every model accepts the values (the share markets' ZIC bidders of Stößer (2009), section
  6.4.1, bid whole units from 1); the built-in workload's default.
- :func:`uniform_int`: uniform on {1, ..., 100}. Source: Stößer (2009), section 5.5.1 (Table 5.2).
- :func:`per_job`: draw one value per original job of a (possibly split) workload and give
  every serial copy its parent's value (Stößer 2009: copies keep the weight).

Decision on draws below 0 (the papers say only "cut off"):
about 1.82% of bimodal draws fall below 0 (0.8 * P(Z < -2)). The default
``negative="resample"`` redraws each such value from the *same* component until it is
>= 0, i.e. each component becomes a normal truncated at 0; the 80/20 mix is exact and no
mass piles up at 0. ``negative="clip"`` sets them to 0 (a point mass of ~1.8% at 0, which
under HB makes those jobs bid 0). ``negative="keep"`` leaves them (for sensitivity
studies only; a negative value is meaningless as a bid). Draws above 180 (~0.46%) are
kept: nothing in the papers bounds values above.

All models take a ``numpy.random.Generator`` (or an int seed) and are vectorised; the
resampling loop runs over the shrinking set of negative draws (about 2% then 0.04% ...),
never per element.
"""

from __future__ import annotations

import numpy as np

NEGATIVE_POLICIES = ("resample", "clip", "keep")


def _rng(rng) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise ValueError(f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}")


def _count(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a whole number >= 0, got {n!r}")
    return int(n)


def bimodal(rng, n: int, low=(30.0, 15.0), high=(150.0, 15.0), p_high: float = 0.2,
            negative: str = "resample", floor: float = 0.0) -> np.ndarray:
    """Values from a two-component normal mix (Shudler et al. 2010, section II.A; Stößer 2009, section 5.5.1).

    Steps:

    1. component: high with probability ``p_high`` (``rng.random(n) < p_high``);
    2. value: ``rng.normal(mean, sd)`` of that component;
    3. draws below ``floor`` (default 0): ``negative="resample"`` (default) redraws them from
       the same component until >= ``floor``; ``"clip"`` sets them to ``floor``; ``"keep"``
       leaves them.

    ``low`` and ``high`` are ``(mean, sd)`` pairs. Returns float64 of length ``n``.
    """
    rng = _rng(rng)
    n = _count(n)
    if not 0.0 <= p_high <= 1.0:
        raise ValueError(f"bimodal: p_high must be in [0, 1], got {p_high!r}")
    for label, (mean, sd) in (("low", low), ("high", high)):
        if not (np.isfinite(mean) and np.isfinite(sd)) or sd < 0:
            raise ValueError(f"bimodal: {label} must be (mean, sd) with finite mean and sd >= 0, got {(mean, sd)!r}")
        if negative == "resample" and mean < floor and sd == 0:
            raise ValueError(f"bimodal: {label} component {(mean, sd)} can never draw a value >= {floor:g}")
    if negative not in NEGATIVE_POLICIES:
        raise ValueError(f"bimodal: negative must be one of {NEGATIVE_POLICIES}, got {negative!r}")
    is_high = rng.random(n) < p_high
    mean = np.where(is_high, high[0], low[0]).astype(np.float64)
    sd = np.where(is_high, high[1], low[1]).astype(np.float64)
    values = rng.normal(mean, sd)
    if negative == "clip":
        np.maximum(values, floor, out=values)
    elif negative == "resample":
        bad = np.flatnonzero(values < floor)
        for _ in range(10_000):
            if bad.size == 0:
                break
            values[bad] = rng.normal(mean[bad], sd[bad])
            bad = bad[values[bad] < floor]
        else:  # a component with nearly all its mass below the floor
            raise ValueError(f"bimodal: resampling draws below {floor:g} did not finish; a component lies almost "
                             f"wholly below it")
    return values


def uniform_int(rng, n: int, low: int = 1, high: int = 100) -> np.ndarray:
    """Values uniform on the integers ``{low, ..., high}`` (both included; Stößer 2009, section 5.5.1).

    Returned as float64 so that every value model has one dtype.
    """
    rng = _rng(rng)
    n = _count(n)
    if int(low) != low or int(high) != high or high < low:
        raise ValueError(f"uniform_int: need whole numbers low <= high, got low={low!r}, high={high!r}")
    return rng.integers(int(low), int(high) + 1, size=n).astype(np.float64)


def bimodal_clipped(rng, n: int, **kwargs) -> np.ndarray:
    """:func:`bimodal` with the draws below 0 set to 0 (``negative="clip"``): the other reading of the
    papers' "cut off", run as an open choice by the Shudler et al. (2010) reproduction."""
    return bimodal(rng, n, negative="clip", **kwargs)


def bimodal_from_one(rng, n: int, **kwargs) -> np.ndarray:
    """:func:`bimodal` with the draws below 1 redrawn from their component (``floor=1``): about 2.1 %
    of draws instead of 1.8 %. Decision: the built-in workload's values, so that every mechanism's
    model accepts them (the ZIC bidders of Stößer (2009), section 6.4.1, bid on ``{1, ..., v}``);
    the shape is the papers' mix truncated at 1 instead of 0."""
    return bimodal(rng, n, floor=1.0, **kwargs)


MODELS = {"bimodal": bimodal, "bimodal-clip": bimodal_clipped, "bimodal-1": bimodal_from_one, "uniform": uniform_int}


def per_job(workload, model="bimodal", rng=0, **kwargs) -> np.ndarray:
    """One value per row of ``workload``, equal for all serial copies of a split job.

    Draws ``len(original)`` values (one per original job, in the original's row order) and
    expands them with ``workload.meta["parent"]`` (set by
    :func:`marketsched.workloads.transforms.split_parallel`), which equals
    ``np.repeat(values, original.procs)``. For an unsplit workload it draws one per row.
    ``model`` is ``"bimodal"``, ``"bimodal-clip"``, ``"uniform"`` or a callable ``f(rng, n, **kwargs)``.
    """
    fn = MODELS.get(model) if isinstance(model, str) else model
    if fn is None or not callable(fn):
        raise ValueError(f"per_job: unknown value model {model!r}; use one of {sorted(MODELS)} or a callable")
    parent = workload.meta.get("parent")
    if parent is None:
        return fn(_rng(rng), len(workload), **kwargs)
    n_orig = int(workload.meta.get("split_from", int(parent.max()) + 1 if len(parent) else 0))
    return fn(_rng(rng), n_orig, **kwargs)[parent]
