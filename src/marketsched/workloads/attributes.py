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
* ``tsafrir``: the model of Tsafrir, Etsion & Feitelson (2005, "Modeling user runtime
  estimates", JSSPP): a few dozen values, the 20 most popular round ones (the maximum first,
  then 1 h, 5 and 15 min, ...), matched to the jobs so that none is below its run time (see
  :func:`estimates_tsafrir`).

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


# Tsafrir, Etsion & Feitelson (2005): the tables and default parameters of the model.
MINUTE = 60
#: Estimates among the 20 most popular in all four logs the model was fitted to (section 4).
TSAFRIR_JOINT = tuple(m * MINUTE for m in (5, 15, 10, 20, 30, 60, 120, 180, 240, 300, 360, 480, 600, 720, 1080))
#: Round units whose multiples complete the head to 20 values, tried in this order, each
#: from the maximum downwards.
TSAFRIR_ROUND = tuple(m * MINUTE for m in (12000, 6000, 3000, 600, 300, 120, 60, 20, 10, 5))
#: For each time rank of the head (0: the maximum, then 1..19 from the shortest), the
#: popularity rank it had in the four logs (SDSC SP2, CTC SP2, KTH SP2, SDSC Blue Horizon).
TSAFRIR_RANKS = ((3, 1, 1, 1), (1, 3, 4, 6), (4, 4, 10, 5), (17, 2, 14, 3), (13, 12, 20, 7), (7, 9, 2, 2),
                 (8, 8, 3, 18), (18, 18, 7, 19), (2, 6, 12, 4), (6, 7, 6, 11), (16, 11, 19, 20), (10, 20, 5, 9),
                 (5, 16, 18, 10), (15, 5, 16, 14), (14, 14, 9, 13), (19, 13, 17, 16), (11, 10, 15, 15),
                 (12, 15, 13, 17), (9, 17, 8, 8), (20, 19, 11, 12))
#: Number of distinct estimates as a piecewise-linear function of the number of jobs.
TSAFRIR_BINS = ((0, 0), (20, 10), (200, 20), (1000, 35), (10000, 90), (70000, 340), (250000, 565))
TSAFRIR_TOP = 20
#: Head shares: popularity rank x = 2..20 has ``a e^(b x) + c`` percent of the jobs.
TSAFRIR_HEAD = (14.0491, -0.177531, 0.462513)
#: Tail shares: popularity rank x >= 21 has ``a x^b`` (scaled to the tail's total).
TSAFRIR_TAIL = (795.6, -2.267)


def _round_half_up(x: float) -> int:
    return int(np.floor(x + 0.5)) if x >= 0 else -int(np.floor(-x + 0.5))


def tsafrir_bins(n_jobs: int) -> int:
    """How many distinct estimates ``n_jobs`` jobs use (the model's linear interpolation)."""
    xs, ys = zip(*TSAFRIR_BINS)
    if n_jobs > xs[-1]:
        return ys[-1]
    k = int(np.searchsorted(xs, n_jobs, side="left"))
    if k == 0:
        return 0
    return ys[k - 1] + _round_half_up((n_jobs - xs[k - 1]) * (ys[k] - ys[k - 1]) / (xs[k] - xs[k - 1]))


def _head_times(max_est: int) -> list[int]:
    """The (up to) 20 head estimates: the maximum first, then the rest in increasing order."""
    head = [max_est] + [t for t in TSAFRIR_JOINT if t < max_est]
    for unit in TSAFRIR_ROUND:
        start = (max_est // unit) * unit
        t = start
        while t > 0 and len(head) < TSAFRIR_TOP:
            if t not in head:
                head.append(t)
            t -= unit
        if len(head) >= TSAFRIR_TOP:
            break
    return [head[0]] + sorted(head[1:])


def _head_shares(n_head: int, head: float, at_max: float) -> list[float]:
    """Percent of jobs of popularity ranks 1..n_head: ``a e^(b x) + c`` for x >= 2 and rank 1
    the rest of ``head``; or rank 1 ``at_max`` (when > 0) and the others scaled to fill ``head``."""
    a, b, c = TSAFRIR_HEAD
    rest = [a * float(np.exp(b * x)) + c for x in range(2, n_head + 1)]
    if at_max > 0:
        return [at_max, *(r * (head - at_max) / sum(rest) for r in rest)]
    first = head - sum(rest)
    if first <= 0:
        raise ValueError(f"estimate model tsafrir: head={head:g}% is not more than the {sum(rest):.1f}% the "
                         f"model gives popularity ranks 2..{n_head}; raise head")
    return sorted([first, *rest], reverse=True)


def _rank_map(rng: np.random.Generator, n_head: int) -> list[int]:
    """Popularity rank (1 = most popular) of each head time rank (0 = the maximum), drawn as the
    model draws it: the maximum is the most popular; a rank whose last appearance in the four
    logs is at this time rank is taken now (the most popular first); otherwise the more popular
    of two draws from the ranks the logs show at this or an earlier time rank."""
    last: dict[int, int] = {}
    for ttr in range(TSAFRIR_TOP - 1, -1, -1):
        for r in TSAFRIR_RANKS[ttr]:
            last.setdefault(r, ttr)
    chosen: list[int] = []
    pool: list[int] = []
    for ttr in range(TSAFRIR_TOP):
        pool += [r for r in TSAFRIR_RANKS[ttr] if r not in chosen]
        pool = [pool[i] for i in rng.permutation(len(pool))]
        if ttr == 0:
            pick = 1
        else:
            due = [r for r in range(1, TSAFRIR_TOP + 1) if last[r] <= ttr and r not in chosen]
            pick = due[0] if due else min(pool[int(rng.integers(len(pool)))] for _ in range(2))
        chosen.append(pick)
        pool = [r for r in pool if r != pick]
    # fewer than 20 head values (a maximum below 10 h): keep the order, renumber 1..n_head
    order = sorted(range(n_head), key=lambda i: chosen[i])
    ranks = [0] * n_head
    for rank, i in enumerate(order, start=1):
        ranks[i] = rank
    return ranks


def tsafrir_shares(n_jobs: int, max_est: float, rng: np.random.Generator, *, head: float = 89.0,
                   at_max: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The model's estimate values (seconds, increasing) for ``n_jobs`` jobs and the percent of
    jobs each has (summing to 100); see :func:`estimates_tsafrir` for the steps."""
    max_est = int(max_est)
    times = _head_times(max_est)
    shares = _head_shares(len(times), head, at_max)
    ranks = _rank_map(rng, len(times))
    percent = {t: shares[r - 1] for t, r in zip(times, ranks)}
    n_tail = max(0, tsafrir_bins(n_jobs) - len(times))
    if n_tail:
        k = 1.0 + 12.1039 * float(tsafrir_bins(n_jobs)) ** -0.6026
        tail: list[int] = []
        for i in range(1, n_tail + 1):
            x = i / n_tail
            sec = _round_half_up((k - 1) * x / (k - x) * max_est / 60.0) * 60
            for off in (0, 30, -30, 20, -20, 10, -10):
                s = sec + off
                if 0 < s < max_est and s not in percent and s not in tail:
                    tail.append(s)
                    break
        sizes = TSAFRIR_TAIL[0] * np.arange(TSAFRIR_TOP + 1, TSAFRIR_TOP + 1 + len(tail), dtype=np.float64) ** TSAFRIR_TAIL[1]
        sizes = sizes * (100.0 - head) / sizes.sum()
        tail = [tail[i] for i in rng.permutation(len(tail))]
        sizes = sizes[rng.permutation(len(sizes))]
        percent.update(zip(tail, sizes.tolist()))
    t = sorted(percent)
    return np.array(t, dtype=np.float64), np.array([percent[x] for x in t])


def tsafrir_histogram(n_jobs: int, max_est: float, rng: np.random.Generator, **shares) -> tuple[np.ndarray, np.ndarray]:
    """The values of :func:`tsafrir_shares` and how many of ``n_jobs`` jobs use each (at least
    one; the rounded shares equalised to sum to ``n_jobs``)."""
    t, p = tsafrir_shares(n_jobs, max_est, rng, **shares)
    counts = np.array([max(1, _round_half_up(x * n_jobs / 100.0)) for x in p], dtype=np.int64)
    return t, _equalise(counts, n_jobs, keep=len(t) - 1 if shares.get("at_max") else None)


def _equalise(counts: np.ndarray, n_jobs: int, keep: int | None = None) -> np.ndarray:
    """Make the rounded counts sum to ``n_jobs``, largest bins first: proportionally, then by
    one job per bin, then down to one job, then to none (the model's order of attempts); bin
    ``keep`` (a share the user gave) stays as it is."""
    counts = counts.copy()
    diff, sign = abs(n_jobs - int(counts.sum())), 1 if n_jobs > counts.sum() else -1
    attempt = 0
    while diff:
        if attempt > 3:
            raise AssertionError("estimate model tsafrir: could not equalise the bin counts")
        free = [int(i) for i in np.argsort(-counts, kind="stable") if i != keep]
        f = diff / max(int(counts[free].sum()), 1)
        for i in free:
            n = int(counts[i])
            if n == 0:
                continue
            adjust = (int(np.ceil(f * n)), 1, n - 1, n)[attempt]
            if sign < 0:
                adjust = min(adjust, n)
                if adjust == n and attempt != 3:
                    adjust -= 1
            adjust = min(adjust, diff)
            counts[i] += sign * adjust
            diff -= adjust
            if diff == 0:
                break
        attempt += 1
    return counts


def tsafrir_assign(runtime: np.ndarray, times: np.ndarray, counts: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
    """Give each job one of the histogram's estimates, never below its run time, using each
    value exactly ``counts`` times: jobs from the longest, each draws uniformly among the
    unused estimates long enough for it and for every shorter job still to come."""
    est = np.repeat(times, counts)[::-1].copy()          # decreasing
    order = np.argsort(-runtime, kind="stable")
    r = runtime[order]
    short = np.flatnonzero(r > est)
    if len(short):
        k = int(short[0])
        raise ValueError(f"estimate model tsafrir: the {k + 1} longest jobs (down to {r[k]:.0f} s) outnumber "
                         f"the estimates >= their run times; raise max (now {times[-1] / HOUR:g} h)")
    out = np.empty(len(r))
    n, hi = len(r), 0
    for j in range(n):
        hi = max(hi, j)
        while hi < n - 1 and r[j] <= est[hi + 1]:
            hi += 1
        k = j + int(rng.integers(hi - j + 1))
        out[j] = est[k]
        est[k], est[j] = est[j], est[k]
    result = np.empty(n)
    result[order] = out
    return result


def estimates_tsafrir(workload, rng, max: float = 0.0, at_max: float = 0.0, head: float = 89.0) -> np.ndarray:
    """The model of Tsafrir, Etsion & Feitelson (2005), "Modeling user runtime estimates".

    Source: the paper (JSSPP 2005, LNCS 3834), sections 4-5, and the authors' reference
    implementation of it (``est_model.cc``, distributed with the paper and the Parallel
    Workloads Archive), whose default parameters and tables are used here unchanged.

    Steps (one histogram for the whole workload, then a matching):

    1. Number of distinct estimates: piecewise linear in the number of jobs
       (:data:`TSAFRIR_BINS`; 5,000 jobs use 59 values).
    2. Head, the 20 most popular values: the maximum ``max``, the 15 values popular in all
       four logs (5, 10, 15, 20, 30 min, 1, 2, 3, 4, 5, 6, 8, 10, 12, 18 h) below it, completed
       with round multiples (of 200, 100, 50, 10, 5, 2, 1 h, 20, 10, 5 min) downwards from it.
    3. Head shares: popularity rank ``x`` = 2..20 has ``a e^(b x) + c`` percent of the jobs
       (a = 14.0491, b = -0.177531, c = 0.462513); rank 1 gets the rest of ``head`` (89%),
       about 21.7%, or ``at_max`` percent when given (the others then scaled to keep ``head``).
    4. Which value gets which rank: the maximum is the most popular; the others follow the
       ranks observed per time rank in the four logs (:data:`TSAFRIR_RANKS`, a random draw
       favouring the more popular, see :func:`_rank_map`).
    5. Tail, the other values: time rank ``i`` of ``K`` tail values at
       ``max x (k-1) y / (k-y)``, ``y = i/K``, ``k = 1 + 12.1039 n^-0.6026`` (``n`` the number of
       distinct values), on whole minutes (moved by 10-30 s where two coincide); shares
       ``795.6 x^-2.267`` for ranks 21.., scaled to ``100 - head`` percent and matched to the
       times at random.
    6. Counts: ``round(share x jobs)``, at least 1, equalised to the number of jobs.
    7. Assignment (the paper's "shuffle"): jobs from the longest run time down, each takes a
       uniformly drawn unused estimate among those >= its run time that leave enough long ones
       for the rest. So no estimate is below its run time and the histogram is exactly that
       of steps 1-6 (the randomness is in steps 4, 5 and the matching).

    Decisions (ours): ``max`` (hours) defaults to the workload's longest run time or request,
    whichever is larger, rounded up to a whole hour (the model needs at least 1 h; the paper
    feeds it the system's maximum allowed estimate). A job longer than ``max``, or more long
    jobs than long estimates, is an error (the reference code truncates run times or
    stops). Rows of a split job share their original's estimate (the copies have its run time).
    The user-supplied bins of the reference code other than the maximum (``at_max``) and
    its alternative power-law bin count are left out.
    """
    if not (np.isfinite(max) and max >= 0):
        raise ValueError(f"estimate model tsafrir: max must be a number of hours >= 1 (0: from the workload), got {max!r}")
    if not (np.isfinite(head) and 0 < head <= 100):
        raise ValueError(f"estimate model tsafrir: head must be a percentage in (0, 100], got {head!r}")
    if not (np.isfinite(at_max) and 0 <= at_max < head):
        raise ValueError(f"estimate model tsafrir: at_max must be a percentage in [0, head={head:g}) "
                         f"(0: the model's share), got {at_max!r}")
    runtime = np.asarray(workload.runtime, dtype=np.float64)
    parent = workload.meta.get("parent")
    first = np.unique(parent, return_index=True)[1] if parent is not None else np.arange(len(runtime))
    original = runtime[first]
    if max == 0:
        request = np.asarray(workload.runtime_estimate, dtype=np.float64)
        longest = float(np.nanmax(np.concatenate([original, request[np.isfinite(request)], [HOUR]])))
        max_est = int(np.ceil(longest / HOUR) * HOUR)
    elif max < 1:
        raise ValueError(f"estimate model tsafrir: max must be at least 1 hour, got {max!r}")
    else:
        max_est = int(round(max * HOUR))
    if len(original) and original.max() > max_est:
        raise ValueError(f"estimate model tsafrir: {int((original > max_est).sum())} jobs run longer than "
                         f"max={max_est / HOUR:g} h; raise max")
    times, counts = tsafrir_histogram(len(original), max_est, rng, head=head, at_max=at_max)
    est = tsafrir_assign(original, times, counts, rng)
    if parent is None:
        return est
    return est[np.searchsorted(np.unique(parent), parent)]


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


ESTIMATES: dict[str, Callable[..., Any]] = {"trace": estimates_trace, "exact": estimates_exact, "badness": estimates_badness,
                                            "tsafrir": estimates_tsafrir}
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
