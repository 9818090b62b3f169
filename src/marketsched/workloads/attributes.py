"""Job attributes a trace does not hold, as named, seeded models (like the value models).

Mechanisms need more than a trace says: EES and Egg need deadlines, WSEPT, EASY and Egg
need run-time estimates, Egg's users may ask for a minimum provider reliability. Each
attribute comes from a model chosen by name (``"patience"``, ``"exact"``, ...) and the
scenario's seed, so any trace gives any mechanism what it needs, reproducibly.

Models
------
Run-time estimates (:data:`ESTIMATES`; they replace the workload's ``runtime_estimate``):

* ``trace``: the user's request as the trace records it (SWF field 9); NaN where missing.
* ``exact``: the actual run time (a clairvoyant user).
* ``badness``: ``runtime * U(1, 1 + f)`` (``f`` = 1 by default): the multiplicative model
  with a "badness" factor used by many backfilling studies, as Tsafrir (2010, "Using
  inaccurate estimates accurately", JSSPP) describes it (and criticises: real estimates
  cluster on a few round values; the built-in synthetic workload rounds its estimates up
  to such values, see :mod:`marketsched.workloads.synthetic`).

Deadlines (:data:`DEADLINES`; absolute times, seconds):

* ``none``: no deadlines (a mechanism that needs them is refused).
* ``patience``: ``submit + P`` with patience ``P = max(U(lo, hi) hours, 2 x run time)``,
  capped below ``cap`` hours (defaults 2, 24, 24): the value schedules of the Kang & Parkes
  (2007) reproduction (``marketsched.experiments.kang2007``), whose providers accept
  deadlines up to the patience bound Delta = 24 h.
* ``slack``: ``submit + factor x run time`` (``factor`` = 3): every job tolerates waiting
  ``factor - 1`` times its run time (our design, a common form of deadline in the literature).

Minimum reliability (:data:`RELIABILITY`; a probability each job's user requires of a
provider, Kang & Parkes (2007), section 2.2):

* ``none``: 0 for every job (no requirement).
* ``mix``: 0 with probability 0.6, 0.8 with 0.25, 0.95 with 0.15 (the user mix of the
  Kang & Parkes (2007) reproduction; our design, the paper's sample bid asks for 99%).

Draws: each attribute has its own random stream, ``numpy.random.default_rng([seed, k])``
with ``k`` = 1 (estimates), 2 (deadlines), 3 (reliability), so adding an attribute never
changes the values (drawn from ``default_rng(seed)``) or another attribute. Like the values
(:func:`marketsched.workloads.values.per_job`), draws are made per *original* job and shared
by the serial copies of a split job (``meta["parent"]``).

A model is named ``"name"`` or ``"name:key=value,..."`` (e.g. ``"badness:f=3"``,
``"patience:lo=1,hi=12"``); :func:`parse_model` checks the name and the parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

HOUR = 3600.0
STREAMS = {"estimates": 1, "deadlines": 2, "reliability": 3}


def _per_original(workload, rng: np.random.Generator, draw) -> np.ndarray:
    """``draw(rng, n)`` for the ``n`` original jobs, expanded to the rows (split copies share it)."""
    parent = workload.meta.get("parent")
    if parent is None:
        return draw(rng, len(workload))
    n_orig = int(workload.meta.get("split_from", int(parent.max()) + 1 if len(parent) else 0))
    return draw(rng, n_orig)[parent]


# ---------------------------------------------------------------------------- estimates
def estimates_trace(workload, rng) -> np.ndarray:
    return np.asarray(workload.runtime_estimate, dtype=np.float64).copy()


def estimates_exact(workload, rng) -> np.ndarray:
    return np.asarray(workload.runtime, dtype=np.float64).copy()


def estimates_badness(workload, rng, f: float = 1.0) -> np.ndarray:
    if not (np.isfinite(f) and f >= 0):
        raise ValueError(f"estimate model badness: f must be a finite number >= 0, got {f!r}")
    factor = _per_original(workload, rng, lambda g, n: g.uniform(1.0, 1.0 + f, n))
    return workload.runtime * factor


# ---------------------------------------------------------------------------- deadlines
def deadlines_none(workload, rng) -> None:
    return None


def deadlines_patience(workload, rng, lo: float = 2.0, hi: float = 24.0, cap: float = 24.0) -> np.ndarray:
    if not (0 < lo <= hi and np.isfinite(hi) and cap > 0):
        raise ValueError(f"deadline model patience: need 0 < lo <= hi and cap > 0 (hours), got lo={lo}, hi={hi}, cap={cap}")
    u = _per_original(workload, rng, lambda g, n: g.uniform(lo, hi, n))
    patience = np.minimum(np.maximum(u * HOUR, 2.0 * workload.runtime), cap * HOUR - 1.0)
    return workload.submit_time + np.maximum(patience, workload.runtime)


def deadlines_slack(workload, rng, factor: float = 3.0) -> np.ndarray:
    if not (np.isfinite(factor) and factor >= 1):
        raise ValueError(f"deadline model slack: factor must be a finite number >= 1, got {factor!r}")
    return workload.submit_time + factor * workload.runtime


# ---------------------------------------------------------------------------- reliability
def reliability_none(workload, rng) -> np.ndarray:
    return np.zeros(len(workload))


def reliability_mix(workload, rng) -> np.ndarray:
    return _per_original(workload, rng, lambda g, n: g.choice([0.0, 0.8, 0.95], n, p=[0.6, 0.25, 0.15]))


ESTIMATES: dict[str, Callable[..., Any]] = {"trace": estimates_trace, "exact": estimates_exact, "badness": estimates_badness}
DEADLINES: dict[str, Callable[..., Any]] = {"none": deadlines_none, "patience": deadlines_patience, "slack": deadlines_slack}
RELIABILITY: dict[str, Callable[..., Any]] = {"none": reliability_none, "mix": reliability_mix}
KINDS: dict[str, dict[str, Callable[..., Any]]] = {"estimates": ESTIMATES, "deadlines": DEADLINES,
                                                  "reliability": RELIABILITY}


def parse_model(kind: str, spec: str) -> tuple[str, dict]:
    """``"name:key=value,..."`` -> ``(name, {key: float})``, checked against the models of ``kind``."""
    import inspect

    models = KINDS[kind]
    name, _, rest = str(spec).partition(":")
    if name not in models:
        raise ValueError(f"unknown {kind} model {name!r}; choose one of {', '.join(models)}")
    accepted = [p for p in inspect.signature(models[name]).parameters if p not in ("workload", "rng")]
    params = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in accepted:
            raise ValueError(f"{kind} model {name!r}: bad parameter {item!r}; it takes "
                             f"{', '.join(f'{a}=NUMBER' for a in accepted) or 'no parameters'}")
        try:
            params[key] = float(value)
        except ValueError:
            raise ValueError(f"{kind} model {name!r}: {key} must be a number, got {value!r}") from None
    return name, params


def draw(kind: str, spec: str, workload, seed: int):
    """The attribute ``kind`` (estimates, deadlines, reliability) of every row from model ``spec``."""
    name, params = parse_model(kind, spec)
    rng = np.random.default_rng([int(seed), STREAMS[kind]])
    return KINDS[kind][name](workload, rng, **params)


def with_estimates(workload, spec: str, seed: int):
    """``workload`` with its ``runtime_estimate`` column from model ``spec`` (unchanged for ``trace``)."""
    from dataclasses import replace

    if parse_model("estimates", spec)[0] == "trace":
        return workload
    est = draw("estimates", spec, workload, seed)
    return replace(workload, runtime_estimate=est, meta={**workload.meta, "estimates": spec})
