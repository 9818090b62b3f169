"""Expected Externality Scheduler (EES) and relaxed EES over a queue snapshot.

Source: Mutz (2008) (A. Mutz, "Eliciting Honest Behavior on Computational Grids", UCSB thesis),
chapter 4 (EES, equations 4.1-4.6) and chapter 6 (relaxed EES, equations 6.1-6.6, delay
estimation of section 6.1.3). The payment rule is the Expected Externality mechanism of
Arrow and d'Aspremont / Gerard-Varet (AGV), thesis equation 3.1.

EES (chapter 4), for the job i at the front of a FIFO queue of I jobs, each job full-width:

1. a = v_i                                   (4.1)
2. b = sum_{j != i} d_j * r_i                (4.2)
3. run i if a >= b, else discard it          (4.3)  (ties run: a >= b, section 4.1.2)
4. every queued job m pays
   mu_m = 1/(I-1) sum_{j != m} xi_j(t_j) - xi_m(t_m)                      (4.4)
   with xi_j(t_j) = E_{s_-j}[ sum_{l != j} U(s_l, kappa(t_j, s_-j)) ] the expected welfare
   of the others given j's report; U = v if the front job runs (4.5), U = -d_l r_i for a
   waiting job l if the front job runs (4.6), 0 on a discard. mu > 0 means the job pays.

Relaxed EES (chapter 6): jobs also request n nodes; r_i in (4.2) becomes the delay that
running i causes job j, delay_j(i) = start of j in the greedy best-effort schedule with i
minus its start without i (section 6.1.3: insert all queued jobs in queue order, each at
its earliest window of n free nodes for r); utilities (6.5)-(6.6) change accordingly.
Both are the same computation with a per-job *externality weight* w_j (w_j = r_i in EES,
w_j = delay_j(i) in relaxed EES): run iff v_i >= sum_j w_j d_j.

Decisions taken where the thesis is silent:

* What is sampled (8.1.1): only v of the front job and d of the waiting jobs; r and n are
  public, fixed at their declared values. Hence the relaxed-EES delays are computed once
  per decision and reused in every draw.
* Prior (8.1.2): a declared ``TypePrior`` (uniform or discrete per parameter, the same for
  all jobs). The audits draw queues from this very prior.
* I = 1 (8.1.4): the lone job runs (b = 0) and pays 0.
* Who is in I (8.1.5): the jobs in the snapshot; the driver excludes running jobs.
* Negative relaxed delays (8.2.11): not clamped (faithful); list-scheduling anomalies can
  make them negative.
* Estimators of the expectations. ``"cached"``: each xi_j is estimated once, with its own
  independent Monte Carlo draws, and reused in every payment: O(I^2 S) work, and the payments
  sum to zero exactly (sum_m mu_m = sum_j xi_j - sum_m xi_m for any numbers xi). ``"naive"``:
  the thesis's nesting (section 4.1.3), every xi_j is re-estimated with fresh draws inside the
  payment of every m: O(I^3 S), and the payments are only balanced in expectation; this is
  the estimator under which the budget imbalance of figures 4.5 and 6.7 exists. ``"shared"``:
  as ``"cached"``, but one set of draws per decision serves every xi_j (common random numbers,
  :func:`welfare_shared`): each xi_j is still an unbiased estimate from S draws, the payments
  still sum to zero exactly, the work is O(I S). What differs from the thesis (section 4.1.3,
  each expectation from draws of its own): the estimates' errors are correlated across the
  jobs of a decision, so a payment's expectation is the same but its spread is not (it is
  ``"cached"`` and ``"naive"`` that the Mutz (2008) reproduction measures). ``"exact"``: exact expectations by
  enumeration, for discrete priors on small queues.

Interface for an online driver (the discrete-event engine calls this at each decision
point: a job arrives to an idle machine, or a node frees and the queue is not empty)::

    ees = EES(prior, n_draws=1000)                  # or RelaxedEES(prior, capacity=...)
    ledger = Ledger()
    while queue and machine_can_consider_front:     # EES: machine idle
        snap = QueueSnapshot(job_id=..., value=..., delay_cost=..., runtime=..., nodes=...)
        dec = ees.decide(snap, rng)                  # RelaxedEES: decide(snap, rng, profile)
        ledger.charge(dec, time=now)                 # every queued job pays dec.payments
        if dec.runs:
            start front job at now                   # RelaxedEES: at dec.start_time, after
                                                     # profile.reserve(dec.start_time, r, n)
            break                                    # (EES: the machine is now busy)
        else:
            discard front job (final state "discarded"), pop it, decide on the next

The snapshot is position-ordered (index 0 is the queue head); ``Decision.payments[k]`` is
charged to ``Decision.job_ids[k]``. Discarding takes zero time (the thesis does not say). For the relaxed
EES the driver passes the availability profile of running and committed jobs (a decision:
an accepted job is committed to the plan at its planned start); the mechanism never modifies
it. Balances may go negative (the thesis specifies no budgets).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from .profile import AvailabilityProfile, ListProfile, greedy_starts, greedy_starts_lists, profile_kernel, profile_lists

ESTIMATORS = ("cached", "shared", "naive", "exact")


# --------------------------------------------------------------------------- priors
@dataclass(frozen=True)
class Uniform:
    """Uniform prior on [low, high] (Mutz 2008, section 8.3: all preferences are uniform)."""

    low: float
    high: float

    def __post_init__(self):
        if not (np.isfinite(self.low) and np.isfinite(self.high) and self.low <= self.high):
            raise ValueError(f"Uniform prior: need finite low <= high, got [{self.low}, {self.high}]")

    def sample(self, rng: np.random.Generator, size) -> np.ndarray:
        return rng.uniform(self.low, self.high, size)

    @property
    def mean(self) -> float:
        return 0.5 * (self.low + self.high)


@dataclass(frozen=True)
class Discrete:
    """Prior with finite support (used for exact expectations by enumeration)."""

    values: tuple
    probs: tuple

    def __post_init__(self):
        v = np.asarray(self.values, dtype=float)
        p = np.asarray(self.probs, dtype=float)
        if v.ndim != 1 or v.shape != p.shape or len(v) == 0:
            raise ValueError(f"Discrete prior: values {v.shape} and probs {p.shape} must be equal non-empty 1-D")
        if not (np.all(np.isfinite(v)) and np.all(p >= 0) and abs(p.sum() - 1) < 1e-9):
            raise ValueError("Discrete prior: values must be finite and probs non-negative summing to 1")

    def sample(self, rng: np.random.Generator, size) -> np.ndarray:
        return rng.choice(np.asarray(self.values, float), size=size, p=np.asarray(self.probs, float))

    @property
    def mean(self) -> float:
        return float(np.dot(self.values, self.probs))


class EqualPoints(Discrete):
    """A :class:`Discrete` prior of equally likely points, sampled by index
    (``values[rng.integers(k)]``, in bytes when ``k <= 256``): several times faster than
    ``rng.choice`` with probabilities, which searches a cumulative table per draw."""

    def sample(self, rng, size):
        k = len(self.values)
        return self._points[rng.integers(0, k, size, dtype=np.uint8 if k <= 256 else np.int64)]

    @functools.cached_property
    def _points(self) -> np.ndarray:
        return np.asarray(self.values, dtype=np.float64)


@dataclass(frozen=True)
class TypePrior:
    """Declared prior of the private parameters: ``value`` (v) and ``delay_cost`` (d)."""

    value: Uniform | Discrete
    delay_cost: Uniform | Discrete


# --------------------------------------------------------------------------- snapshot
@dataclass(frozen=True)
class QueueSnapshot:
    """The queue at a decision point, in FIFO order (index 0 is the head, the job decided on).

    ``value`` is v, ``delay_cost`` is d (currency per time unit of ``runtime``), ``runtime``
    is the declared maximal running time r, ``nodes`` the node count n (relaxed EES only;
    EES jobs are full-width).
    """

    job_id: np.ndarray
    value: np.ndarray
    delay_cost: np.ndarray
    runtime: np.ndarray
    nodes: np.ndarray | None = None

    def __post_init__(self):
        cols = {"job_id": self.job_id, "value": self.value, "delay_cost": self.delay_cost, "runtime": self.runtime}
        if self.nodes is not None:
            cols["nodes"] = self.nodes
        arrays = {k: np.asarray(v) for k, v in cols.items()}
        n = len(arrays["job_id"])
        for k, a in arrays.items():
            if a.ndim != 1 or len(a) != n:
                raise ValueError(f"QueueSnapshot: column {k!r} has shape {a.shape}, expected ({n},)")
            object.__setattr__(self, k, a)
        if n == 0:
            raise ValueError("QueueSnapshot: the queue is empty (no decision to take)")
        for k in ("value", "delay_cost", "runtime"):
            a = arrays[k].astype(float)
            bad = np.flatnonzero(~np.isfinite(a))
            if len(bad):
                raise ValueError(f"QueueSnapshot: {k} is not finite at position {bad[0]}")
            object.__setattr__(self, k, a)
        for k, pos in (("delay_cost", np.flatnonzero(self.delay_cost < 0)),
                       ("runtime", np.flatnonzero(self.runtime <= 0))):
            if len(pos):
                raise ValueError(f"QueueSnapshot: {k} must be {'>= 0' if k == 'delay_cost' else '> 0'}, "
                                 f"bad at position {pos[0]} (job {self.job_id[pos[0]]})")
        if self.nodes is not None:
            bad = np.flatnonzero(self.nodes <= 0)
            if len(bad):
                raise ValueError(f"QueueSnapshot: nodes must be positive, bad at position {bad[0]}")

    def __len__(self) -> int:
        return len(self.job_id)

    @classmethod
    def of_checked(cls, job_id: np.ndarray, value: np.ndarray, delay_cost: np.ndarray, runtime: np.ndarray,
                   nodes: np.ndarray | None = None) -> QueueSnapshot:
        """A snapshot of columns its caller has checked once for all decisions (non-empty equal 1-D
        float arrays, finite, ``delay_cost >= 0``, ``runtime > 0``, ``nodes > 0``): the online
        drivers check every job at binding, and a second pass per decision would cost as much as
        the decision's own arithmetic."""
        snap = object.__new__(cls)
        for k, v in (("job_id", job_id), ("value", value), ("delay_cost", delay_cost), ("runtime", runtime),
                     ("nodes", nodes)):
            object.__setattr__(snap, k, v)
        return snap


@dataclass(frozen=True)
class Decision:
    """One front-of-queue decision: run or discard ``job_ids[0]``, and everyone's payment."""

    job_ids: np.ndarray
    runs: bool
    value: float                 # a, eq 4.1 / 6.1
    externality: float           # b, eq 4.2 / 6.2
    weights: np.ndarray          # w_j per waiting job (r_i, or delay_j(i)), shape (I-1,)
    payments: np.ndarray         # mu_m per queued job, shape (I,); > 0 means pays
    welfare_of_others: np.ndarray  # xi_m(t_m) estimates, shape (I,)
    start_time: float | None = None  # relaxed EES: planned start of the front job if it runs


# --------------------------------------------------------------------------- core maths
def decide(front_value: float, delay_cost, weights) -> tuple[bool, float]:
    """Allocation rule (4.3)/(6.3): run iff v >= b = sum_j w_j d_j. Returns (runs, b)."""
    b = float(np.dot(weights, delay_cost))
    return bool(front_value >= b), b


def payments_from_welfare(xi: np.ndarray) -> np.ndarray:
    """AGV payment (4.4): mu_m = mean_{j != m} xi_j - xi_m (0 for a lone job)."""
    xi = np.asarray(xi, dtype=float)
    n = len(xi)
    if n == 1:
        return np.zeros(1)
    return (xi.sum() - xi) / (n - 1) - xi


def _xi_front(v0: float, weights: np.ndarray, d_draws: np.ndarray) -> float:
    """xi_0(v0): others' expected welfare when the front job reports v0; d_draws (S, I-1)."""
    b = d_draws @ weights
    return float(np.mean(np.where(v0 >= b, -b, 0.0)))


def welfare_estimates(front_value: float, delay_cost: np.ndarray, weights: np.ndarray, prior: TypePrior,
                      n_draws: int, rng: np.random.Generator, block_elems: int = 4_000_000) -> np.ndarray:
    """Monte Carlo xi_m(t_m) for every queued job m, each with its own independent draws.

    Position 0 is the front job (report v), positions 1.. the waiting jobs (report d).
    Vectorised over blocks of jobs: a block of c waiting jobs draws (c, S) front values and
    (c, S, I-1) delay costs, so the whole estimate costs O(I^2 S) array work.
    """
    m = len(delay_cost)  # waiting jobs
    xi = np.empty(m + 1)
    xi[0] = _xi_front(front_value, weights, prior.delay_cost.sample(rng, (n_draws, m))) if m else 0.0
    c = max(1, block_elems // max(1, n_draws * m))
    for lo in range(0, m, c):
        js = np.arange(lo, min(m, lo + c))
        v = prior.value.sample(rng, (len(js), n_draws))
        d = prior.delay_cost.sample(rng, (len(js), n_draws, m))
        w_rest = np.broadcast_to(weights, (len(js), m)).copy()
        w_rest[np.arange(len(js)), js] = 0.0                       # drop j's own (sampled) term
        rest = np.einsum("csk,ck->cs", d, w_rest)                  # sum_{l != 0, j} w_l s_l
        b = (weights[js] * delay_cost[js])[:, None] + rest         # externality with j's report
        xi[js + 1] = np.mean(np.where(v >= b, v - rest, 0.0), axis=1)
    return xi


def welfare_shared(front_value: float, delay_cost: np.ndarray, weights: np.ndarray, prior: TypePrior,
                   n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """Monte Carlo xi_m(t_m) for every queued job m from one set of draws per decision.

    Steps (S = ``n_draws``, m waiting jobs):

    1. draw the waiting jobs' delay costs ``D`` (S, m) and a front value ``V`` (S,) from the prior,
       in this order;
    2. ``b = D @ weights``: the externality in each draw; xi_0(v) = mean of ``-b`` where ``v >= b``;
    3. for waiting job j, replace its sampled term by its report:
       ``rest_j = b - D[:, j] w_j``, ``b_j = w_j d_j + rest_j``, and
       xi_j = mean of ``V - rest_j`` where ``V >= b_j`` (the front runs), else 0.

    Each xi is the estimate of :func:`welfare_estimates` with the draws of step 1 (common random
    numbers instead of independent draws per job): O(I S) work instead of O(I^2 S).
    """
    m = len(delay_cost)
    if m == 0:
        return np.zeros(1)
    D = prior.delay_cost.sample(rng, (n_draws, m))
    V = prior.value.sample(rng, n_draws)
    b = D @ weights
    xi = np.empty(m + 1)
    # means as sum / S: np.mean's own operations (one add.reduce, one division) without its wrapper
    xi[0] = float(np.where(front_value >= b, -b, 0.0).sum()) / n_draws
    rest = b[:, None] - D * weights
    bj = weights * delay_cost + rest
    xi[1:] = np.where(V[:, None] >= bj, V[:, None] - rest, 0.0).sum(axis=0) / n_draws
    return xi


def compiled_draws_spec(prior: TypePrior) -> tuple | None:
    """The arguments of the compiled draws (``_profile_kernel.prior_draws``) for ``prior``: per parameter
    (delay cost, then value) ``(points, low, range)``, an :class:`EqualPoints` prior as the bytes of its
    float64 points, a :class:`Uniform` as ``low`` and ``high - low`` (what ``Generator.uniform`` computes);
    None when a parameter's prior is of another type (its draws stay NumPy's) or a uniform's range
    overflows (``Generator.uniform`` raises on it)."""
    spec: list[tuple[bytes | None, float, float]] = []
    for p in (prior.delay_cost, prior.value):
        if type(p) is EqualPoints:
            spec.append((p._points.tobytes(), 0.0, 0.0))
        elif type(p) is Uniform and np.isfinite(float(p.high) - float(p.low)):
            spec.append((None, float(p.low), float(p.high) - float(p.low)))
        else:
            return None
    return tuple(spec)


def shared_payments_compiled(kernel, spec: tuple, front_value: float, delay_cost: np.ndarray, weights: np.ndarray,
                             n_draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """:func:`welfare_shared` and :func:`payments_from_welfare` with the draws and the arithmetic in C
    (``kernel``: :func:`~marketsched.mechanisms.online.profile.profile_kernel`; ``spec``:
    :func:`compiled_draws_spec`), bit for bit the same numbers: the draws from ``rng``'s bit generator as
    ``Generator.integers``/``uniform`` make them (the generator's state advances alike), the externality of
    every draw ``b = D @ weights`` by NumPy (the same BLAS product), every other operation in the reference's
    order. Needs at least one waiting job. Returns ``(payments, xi)``."""
    m = len(delay_cost)
    D = np.empty((n_draws, m))
    V = np.empty(n_draws)
    (dp, dlow, drange), (vp, vlow, vrange) = spec
    kernel.prior_draws(rng.bit_generator.capsule, n_draws, m, D, dp, dlow, drange, V, vp, vlow, vrange)
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    b = D @ weights
    xi = np.empty(m + 1)
    pay = np.empty(m + 1)
    kernel.shared_payments(front_value, n_draws, m, D, V, b, weights, np.ascontiguousarray(delay_cost, dtype=np.float64),
                           xi, pay)
    return pay, xi


def welfare_exact(front_value: float, delay_cost: np.ndarray, weights: np.ndarray, prior: TypePrior,
                  max_profiles: int = 2_000_000) -> np.ndarray:
    """Exact xi_m(t_m) by enumerating every profile of the others (discrete priors only)."""
    if not (isinstance(prior.value, Discrete) and isinstance(prior.delay_cost, Discrete)):
        raise ValueError("welfare_exact: exact expectations need Discrete priors for value and delay_cost")
    m = len(delay_cost)
    dv, dp = np.asarray(prior.delay_cost.values, float), np.asarray(prior.delay_cost.probs, float)
    vv, vp = np.asarray(prior.value.values, float), np.asarray(prior.value.probs, float)
    if len(dv) ** m * len(vv) > max_profiles:
        raise ValueError(f"welfare_exact: {len(dv)}^{m} x {len(vv)} profiles exceed max_profiles={max_profiles}")

    def grid(k):  # all profiles of k delay costs with their probabilities
        if k == 0:
            return np.zeros((1, 0)), np.ones(1)
        idx = np.array(list(itertools.product(range(len(dv)), repeat=k)))
        return dv[idx], np.prod(dp[idx], axis=1)

    xi = np.empty(m + 1)
    if m == 0:
        return np.zeros(1)
    g, p = grid(m)
    b = g @ weights
    xi[0] = float(np.sum(p * np.where(front_value >= b, -b, 0.0)))
    g, p = grid(m - 1)
    for j in range(m):
        rest = g @ np.delete(weights, j)                          # (P,)
        bj = weights[j] * delay_cost[j] + rest
        run = vv[:, None] >= bj[None, :]                          # (K_v, P)
        xi[j + 1] = float(np.sum(vp[:, None] * p[None, :] * np.where(run, vv[:, None] - rest[None, :], 0.0)))
    return xi


def expected_externality_payments(front_value: float, delay_cost, weights, prior: TypePrior, n_draws: int = 1000,
                                  rng: np.random.Generator | None = None, estimator: str = "cached"
                                  ) -> tuple[np.ndarray, np.ndarray]:
    """Payments (4.4)/(6.4) for all queued jobs; returns (payments, xi).

    ``delay_cost`` and ``weights`` are over the waiting jobs (positions 1..I-1).
    See the module docstring for the three estimators.
    """
    delay_cost = np.asarray(delay_cost, dtype=float)
    weights = np.asarray(weights, dtype=float)
    if delay_cost.shape != weights.shape or delay_cost.ndim != 1:
        raise ValueError(f"expected_externality_payments: delay_cost {delay_cost.shape} and weights "
                         f"{weights.shape} must be equal 1-D shapes")
    if estimator not in ESTIMATORS:
        raise ValueError(f"expected_externality_payments: estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if estimator == "exact":
        xi = welfare_exact(front_value, delay_cost, weights, prior)
        return payments_from_welfare(xi), xi
    if not (isinstance(n_draws, (int, np.integer)) and n_draws > 0):
        raise ValueError(f"expected_externality_payments: n_draws must be a positive integer, got {n_draws!r}")
    if rng is None:
        raise ValueError("expected_externality_payments: Monte Carlo estimators need an explicit rng")
    if estimator in ("cached", "shared"):
        welfare = welfare_estimates if estimator == "cached" else welfare_shared
        xi = welfare(front_value, delay_cost, weights, prior, n_draws, rng)
        return payments_from_welfare(xi), xi
    # naive (thesis nesting): fresh estimates of every xi_j inside every payment mu_m
    n = len(delay_cost) + 1
    pay = np.zeros(n)
    if n == 1:
        return pay, np.zeros(1)
    xi_last = np.zeros(n)
    for m_ in range(n):
        xi_last = welfare_estimates(front_value, delay_cost, weights, prior, n_draws, rng)
        pay[m_] = (xi_last.sum() - xi_last[m_]) / (n - 1) - xi_last[m_]
    return pay, xi_last


# --------------------------------------------------------------------------- mechanisms
class EES:
    """Expected Externality Scheduler, Mutz (2008), chapter 4 (eqs 4.1-4.6); full-width jobs.

    ``decide(queue, rng)`` takes the run-or-discard decision for ``queue`` position 0 and
    computes every queued job's payment for that decision (see the module docstring).
    """

    def __init__(self, prior: TypePrior, n_draws: int = 1000, estimator: str = "cached"):
        if estimator not in ESTIMATORS:
            raise ValueError(f"EES: estimator must be one of {ESTIMATORS}, got {estimator!r}")
        if not (isinstance(n_draws, (int, np.integer)) and n_draws > 0):
            raise ValueError(f"EES: n_draws must be a positive integer, got {n_draws!r}")
        self.prior = prior
        self.n_draws = int(n_draws)
        self.estimator = estimator
        self.kernel: ModuleType | None = None  # RelaxedEES: the compiled profiles, draws and payments (profile_kernel), when built
        self.draws_spec: tuple | None = None  # with a kernel, the 'shared' payments in C (compiled_draws_spec)

    def externality_weights(self, queue: QueueSnapshot, profile: AvailabilityProfile | ListProfile | None = None,
                            now: float = 0.0) -> tuple[np.ndarray, float | None]:
        """w_j = r_i for every waiting job (running i delays each of them by r_i, eq 4.2).

        ``profile`` and ``now`` are used by :class:`RelaxedEES` only.
        """
        return np.full(len(queue) - 1, queue.runtime[0]), None

    def decide(self, queue: QueueSnapshot, rng: np.random.Generator | None = None,
               profile: AvailabilityProfile | ListProfile | None = None, now: float = 0.0) -> Decision:
        weights, start = self.externality_weights(queue, profile, now)
        v0, d = float(queue.value[0]), queue.delay_cost[1:]
        runs, b = decide(v0, d, weights)
        if self.draws_spec is not None and isinstance(rng, np.random.Generator):
            # the lone job (I = 1) pays 0 and draws nothing, as in welfare_shared and payments_from_welfare
            pay, xi = (shared_payments_compiled(self.kernel, self.draws_spec, v0, d, weights, self.n_draws, rng)
                       if len(d) else (np.zeros(1), np.zeros(1)))
        else:
            pay, xi = expected_externality_payments(v0, d, weights, self.prior, self.n_draws, rng, self.estimator)
        return Decision(job_ids=queue.job_id.copy(), runs=runs, value=v0, externality=b, weights=weights,
                        payments=pay, welfare_of_others=xi, start_time=start if runs else None)


class RelaxedEES(EES):
    """Relaxed EES, Mutz (2008), chapter 6 (eqs 6.1-6.6, delay estimate of section 6.1.3).

    Steps of ``decide(queue, rng, profile=None, now=0.0)``:

    1. copy the availability profile of running/committed jobs (an empty machine of
       ``capacity`` nodes starting at ``now`` when none is given);
    2. greedily insert all queued jobs in queue order at their earliest windows (schedule
       with i), and again without the front job i (schedule without i);
    3. delay_j(i) = start_j(with i) - start_j(without i) (not clamped; section 6.1.3 does not discuss clamping);
    4. run i iff v_i >= sum_j d_j delay_j(i)  (6.3); its planned start is its start in (2);
    5. payments (6.4) as in EES with weights delay_j(i); with the compiled kernel, the ``"shared"``
       estimator and a uniform or equal-points prior, computed by :func:`shared_payments_compiled`
       (the same numbers as :func:`welfare_shared`, bit for bit).
    """

    def __init__(self, prior: TypePrior, capacity: int, n_draws: int = 1000, estimator: str = "cached",
                 fast: bool = True):
        super().__init__(prior, n_draws, estimator)
        if not isinstance(capacity, (int, np.integer)) or capacity <= 0:
            raise ValueError(f"RelaxedEES: capacity must be a positive integer, got {capacity!r}")
        self.capacity = int(capacity)
        self.fast = bool(fast)  # the schedules of step 2 on Python lists (greedy_starts); False: the reference
        self.kernel = profile_kernel() if self.fast else None  # the lists' greedy and profiles in C, when built
        self.schedule = greedy_starts_lists if self.kernel is None else self.kernel.greedy_starts
        if self.kernel is not None and estimator == "shared":
            self.draws_spec = compiled_draws_spec(prior)

    def delays(self, queue: QueueSnapshot, profile: AvailabilityProfile | ListProfile | None = None, now: float = 0.0
               ) -> tuple[np.ndarray, float]:
        if queue.nodes is None:
            raise ValueError("RelaxedEES: the queue snapshot needs a nodes column")
        nd = queue.nodes.tolist()
        if nd and max(nd) > self.capacity:
            k = next(i for i, n in enumerate(nd) if n > self.capacity)
            raise ValueError(f"RelaxedEES: job {queue.job_id[k]} asks {nd[k]} nodes on a {self.capacity}-node machine")
        if profile is not None and profile.capacity != self.capacity:
            raise ValueError(f"RelaxedEES: profile capacity {profile.capacity} != mechanism capacity {self.capacity}")
        base = profile if profile is not None else AvailabilityProfile(self.capacity, now)
        if self.fast:  # both schedules on lists, without an array per call (queues of a few jobs)
            rt = queue.runtime.tolist()
            if rt:
                base._check_request("greedy_starts", max(nd), max(rt))
                base._check_request("greedy_starts", min(nd), min(rt))
            # the compiled greedy reads the lists without changing them; greedy_starts_lists changes
            # the lists it gets, so it gets a copy for each schedule
            times: list
            used: list
            if self.kernel is not None and isinstance(base, ListProfile):
                times, used, shared = base.times, base.used, True
            else:
                (times, used), shared = profile_lists(base), False
            with_list = self.schedule(times, used, self.capacity, rt, nd)
            if len(rt) > 1 and not shared:
                times, used = profile_lists(base)
            without_list = self.schedule(times, used, self.capacity, rt[1:], nd[1:]) if len(rt) > 1 else []
            return np.subtract(with_list[1:], without_list, dtype=np.float64), float(with_list[0])
        with_i = greedy_starts(queue.runtime, queue.nodes, self.capacity, base, fast=False)
        without_i = greedy_starts(queue.runtime[1:], queue.nodes[1:], self.capacity, base, fast=False)
        return with_i[1:] - without_i, float(with_i[0])

    def externality_weights(self, queue: QueueSnapshot, profile: AvailabilityProfile | ListProfile | None = None,
                            now: float = 0.0) -> tuple[np.ndarray, float | None]:
        return self.delays(queue, profile, now)


# --------------------------------------------------------------------------- ledger
@dataclass
class Ledger:
    """Per-decision record of EES payments and the running balance of every job."""

    rows: list = field(default_factory=list)
    balance: dict = field(default_factory=dict)

    def charge(self, decision: Decision, time: float | None = None) -> None:
        k = len(self.rows)
        self.rows.append((k, time, decision))
        for jid, mu in zip(decision.job_ids.tolist(), decision.payments.tolist()):
            self.balance[jid] = self.balance.get(jid, 0.0) - mu

    def to_frame(self):
        """Tidy table: one row per (decision, queued job)."""
        import pandas as pd

        parts = []
        for k, time, d in self.rows:
            n = len(d.job_ids)
            parts.append(pd.DataFrame({
                "decision": k, "time": time, "front_job": d.job_ids[0], "runs": d.runs,
                "job_id": d.job_ids, "position": np.arange(n), "payment": d.payments,
            }))
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
            columns=["decision", "time", "front_job", "runs", "job_id", "position", "payment"])

    @property
    def imbalance(self) -> float:
        """Total payments received minus paid, over all decisions (0 for a balanced budget)."""
        return float(sum(d.payments.sum() for _, _, d in self.rows))
