"""User utilities under the paper's beliefs, and the misreports of definition 7.

Source: Kang & Parkes (2007), section 2.2 (definitions 1-3) and section 3.1
(definition 7, theorem 1).

* **Threshold-reliability beliefs (definition 2):** every provider in ``Gamma_i`` (reliability
  ``>= gamma_i``) is equally likely to complete the job, whatever the completion time.
* **Uniform-failure beliefs (definition 3):** on a given provider, a description ``J' > J``
  is no likelier to complete than ``J``.
* The paper leaves implicit what a user believes about providers *outside* ``Gamma_i``
  (lowering ``gamma_hat`` would admit providers the user distrusts).
  **Decision:** an award from a provider outside ``Gamma_i`` is worth 0 to the user (she
  believes it will not deliver). Without some such assumption a user could gain by lowering
  ``gamma_hat``, and theorem 1 could not hold.

With these beliefs the expected utility of an award ``(k, tau, p)`` for a report ``J_hat`` is
``q(J_hat) * (v_i(J_hat, tau) - p)`` if ``k`` is in ``Gamma_i`` (0 otherwise), where
``v_i(J_hat, tau) = w_i(tau)`` if ``J_hat >= J_i`` and 0 otherwise (definition 1: the reported
job is what runs, rule R4), and ``q(J_hat) <= q(J_i)`` (definition 3). The audits use
``q = 1`` for every report: a smaller ``q`` for a misreport only shrinks a positive gain and
a negative one stays below the truthful utility, which is ``>= 0``; ``q = 1`` is the case
most favourable to the manipulator.

:func:`misreports` draws the deviations definition 7 names (arrival, description, value
schedule, minimum reliability), one family at a time and combined.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from marketsched.mechanisms.online.egg.bids import Bid, JobType, Linear, Steps, ValueSchedule, dominates


def believed_utility(job: JobType, description_run, provider: int, completion: float, price: float,
                     gamma_set: np.ndarray, success: float = 1.0, categorical_mask=None) -> float:
    """Expected utility of an award under threshold-reliability and uniform-failure beliefs.

    ``provider < 0`` (no award): 0. ``gamma_set`` is the (K,) mask of ``Gamma_i`` (the
    user's *true* threshold, reliability read at the true arrival). ``success`` is the
    believed completion probability ``q``.
    """
    if provider < 0:
        return 0.0
    if not gamma_set[provider]:
        return 0.0
    ok = bool(dominates(description_run, job.description, categorical_mask))
    value = float(job.schedule.value_at(completion)) if ok else 0.0
    return success * (value - float(price))


def random_schedule(rng: np.random.Generator, start: float, horizon: float, scale: float = 20.0) -> ValueSchedule:
    """A random non-increasing schedule positive somewhere in ``[start, horizon]``."""
    d = start + rng.uniform(0.05, 1.0) * (horizon - start)
    if rng.random() < 0.5:
        v0 = rng.uniform(0.0, scale)
        v1 = rng.uniform(0.0, v0) if rng.random() < 0.7 else v0
        return Linear(v0, v1, start, d)
    n = int(rng.integers(1, 4))
    breaks = np.sort(rng.uniform(start, d, n - 1)) if n > 1 else np.array([])
    breaks = np.unique(np.concatenate([[start], breaks, [d]]))
    vals = np.sort(rng.uniform(0.0, scale, len(breaks) - 1))[::-1]
    return Steps(tuple(breaks), tuple(vals))


@dataclass(frozen=True)
class Misreport:
    """One deviation: the report and how much later than the true arrival it is submitted."""

    kind: str
    bid: Bid
    delay: float = 0.0


KINDS = ("arrival", "description_up", "description_down", "value_scale", "deadline_extend", "deadline_cut",
         "value_random", "reliability", "combined")


def misreports(job: JobType, rng: np.random.Generator, delta: float, categorical_mask=None,
               kinds=KINDS, scale: float = 20.0) -> list[Misreport]:
    """One random deviation of each family in ``kinds`` (definition 7's four parameters, and all at once).

    Families: ``arrival`` (a later submission, ``0 < delay <= Delta``; no early arrivals,
    R10), ``description_up`` (``J_hat > J``), ``description_down`` (``J_hat`` not ``>= J``:
    a different job runs, worth 0), ``value_scale`` (``w`` scaled by a factor in
    ``[0.3, 3]``), ``deadline_extend`` (value kept until ``a + Delta``), ``deadline_cut``
    (value truncated early), ``value_random`` (any schedule), ``reliability`` (any
    ``gamma_hat``), ``combined`` (all parameters at once).
    """
    cat = np.zeros(job.description.shape[0], bool) if categorical_mask is None else np.asarray(categorical_mask, bool)
    a = job.arrival
    out = []

    def desc_up():
        x = job.description.copy()
        x[~cat] += rng.exponential(1.0, (~cat).sum()) * (rng.random((~cat).sum()) < 0.7)
        return x

    def desc_down():
        """A description not >= J: shrink a positive ordered attribute, or change a category."""
        x = job.description.copy()
        pos = np.nonzero(~cat & (x > 0))[0]
        if pos.size and not (cat.any() and rng.random() < 0.3):
            j = rng.choice(pos)
            x[j] *= rng.uniform(0.0, 0.9)
        elif cat.any():
            j = np.nonzero(cat)[0][0]
            x[j] += 1.0
        return x  # unchanged only if J is all zeros with no category (nothing is below it)

    def extend():
        w = job.schedule
        v = float(w.value_at(a))
        return Steps((a, a + delta), (max(v, 1e-3),)) if rng.random() < 0.5 else Linear(v, v * rng.random(), a, a + delta)

    def cut():
        d = job.schedule.deadline
        return job.schedule.truncated(a + rng.uniform(0.0, 1.0) * max(0.0, min(d, a + delta) - a))

    for kind in kinds:
        J, w, g, delay = job.description, job.schedule, job.min_reliability, 0.0
        if kind == "arrival":
            delay = rng.uniform(0.0, delta) + 1e-6
        elif kind == "description_up":
            J = desc_up()
        elif kind == "description_down":
            J = desc_down()
        elif kind == "value_scale":
            w = w.scaled(float(rng.uniform(0.3, 3.0)))
        elif kind == "deadline_extend":
            w = extend()
        elif kind == "deadline_cut":
            w = cut()
        elif kind == "value_random":
            w = random_schedule(rng, a, a + delta, scale)
        elif kind == "reliability":
            g = float(rng.choice([0.0, rng.random(), 1.0]))
        elif kind == "combined":
            delay = rng.uniform(0.0, delta) * (rng.random() < 0.5)
            J = desc_up() if rng.random() < 0.7 else desc_down()
            w = random_schedule(rng, a, a + delta, scale) if rng.random() < 0.5 else w.scaled(float(rng.uniform(0.5, 2)))
            g = float(rng.random())
        else:
            raise ValueError(f"misreports: unknown kind {kind!r}; kinds are {KINDS}")
        out.append(Misreport(kind, Bid(J, w, g, job.view), float(delay)))
    return out
