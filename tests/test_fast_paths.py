"""Fast paths against their references, on random instances with ties: equal results, record for record."""

import numpy as np
import pytest

from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.ees import TypePrior, Uniform
from marketsched.mechanisms.online.ees_driver import RelaxedEESPolicy
from marketsched.mechanisms.online.profile import AvailabilityProfile, greedy_starts
from marketsched.workloads.workload import Workload

RECORDS = ("first_start", "end_time", "preemptions", "payment", "state")


def assert_same_records(a, b):
    for name in RECORDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def random_profile(rng, capacity):
    """A profile with reservations on whole times (ties: equal starts and ends)."""
    p = AvailabilityProfile(capacity, float(rng.integers(0, 3)))
    for _ in range(rng.integers(0, 12)):
        n = int(rng.integers(1, capacity + 1))
        p.place(n, float(rng.integers(1, 6)), after=float(rng.integers(0, 15)))
    return p


@pytest.mark.parametrize("seed", range(300))
def test_greedy_starts_on_lists_equal_the_profile_reference(seed):
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 9))
    p = random_profile(rng, capacity)
    before = (p.times.copy(), p.used.copy())
    k = int(rng.integers(0, 15))
    runtime = rng.integers(1, 6, k).astype(float) * (0.5 if seed % 3 == 0 else 1.0)
    nodes = rng.integers(1, capacity + 1, k)
    fast = greedy_starts(runtime, nodes, capacity, p)
    ref = greedy_starts(runtime, nodes, capacity, p, fast=False)
    np.testing.assert_array_equal(fast, ref)
    np.testing.assert_array_equal(p.times, before[0])  # the profile is not modified
    np.testing.assert_array_equal(p.used, before[1])


def test_greedy_starts_refuses_a_job_wider_than_the_machine():
    with pytest.raises(ValueError, match="5 nodes requested on a 4-node machine"):
        greedy_starts([1.0], [5], 4)


def random_parallel_workload(rng, n, capacity):
    submit = np.sort(rng.integers(0, n * 2, n)).astype(float)   # ties in submit times
    runtime = rng.integers(1, 20, n).astype(float)             # ties in run times
    estimate = runtime * rng.integers(1, 3, n)
    procs = rng.integers(1, capacity + 1, n)
    return Workload.from_columns(submit_time=submit, runtime=runtime, runtime_estimate=estimate, procs=procs,
                                 capacity=capacity)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("compress", [True, False])
def test_relaxed_ees_fast_equals_reference(seed, compress):
    rng = np.random.default_rng(seed)
    w = random_parallel_workload(rng, 60, int(rng.integers(2, 9)))
    v = rng.integers(1, 40, len(w)).astype(float)
    d = rng.integers(0, 4, len(w)).astype(float)
    prior = TypePrior(Uniform(0.0, 40.0), Uniform(0.0, 4.0))
    runs = []
    for fast in (True, False):
        pol = RelaxedEESPolicy(v, d, prior, n_draws=20, seed=seed, time_unit=1.0, compress=compress, fast=fast)
        runs.append((Simulator(w, pol).run(), pol))
    (a, pa), (b, pb) = runs
    assert_same_records(a, b)
    assert pa.planned_start == pb.planned_start and pa.moved_up == pb.moved_up


# --------------------------------------------------------------------------- EES: one set of draws per decision
def shared_reference(front_value, d, w, prior, n_draws, rng):
    """The definition, job by job: each xi from the decision's one set of draws (same order)."""
    D = prior.delay_cost.sample(rng, (n_draws, len(d)))
    V = prior.value.sample(rng, n_draws)
    xi = [np.mean([-sum(D[s] * w) if front_value >= sum(D[s] * w) else 0.0 for s in range(n_draws)])]
    for j in range(len(d)):
        total = []
        for s in range(n_draws):
            rest = sum(D[s, k] * w[k] for k in range(len(d)) if k != j)
            total.append(V[s] - rest if V[s] >= w[j] * d[j] + rest else 0.0)
        xi.append(np.mean(total))
    return np.array(xi)


@pytest.mark.parametrize("seed", range(40))
def test_shared_draws_estimator_equals_its_definition(seed):
    from marketsched.mechanisms.online.ees import Discrete, welfare_shared

    rng = np.random.default_rng(seed)
    m = int(rng.integers(0, 6))
    prior = TypePrior(Discrete((0.0, 5.0, 10.0), (0.3, 0.3, 0.4)), Uniform(0.0, 3.0) if seed % 2 else
                      Discrete((0.0, 1.0, 2.0), (0.5, 0.25, 0.25)))
    d = rng.integers(0, 3, m).astype(float)   # ties among the reports
    w = rng.integers(0, 4, m).astype(float)
    v0 = float(rng.integers(0, 12))
    got = welfare_shared(v0, d, w, prior, 30, np.random.default_rng(seed + 1000))
    if m == 0:
        np.testing.assert_array_equal(got, [0.0])
        return
    want = shared_reference(v0, d, w, prior, 30, np.random.default_rng(seed + 1000))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


def test_shared_draws_estimate_the_exact_expectations_and_balance():
    from marketsched.mechanisms.online.ees import Discrete, expected_externality_payments, welfare_exact

    prior = TypePrior(Discrete((0.0, 6.0, 12.0), (0.3, 0.3, 0.4)), Discrete((0.0, 1.0, 2.0), (0.5, 0.25, 0.25)))
    d, w = np.array([1.0, 2.0, 0.0]), np.array([2.0, 1.0, 3.0])
    exact = welfare_exact(7.0, d, w, prior)
    pay, xi = expected_externality_payments(7.0, d, w, prior, 200_000, np.random.default_rng(5), "shared")
    np.testing.assert_allclose(xi, exact, atol=0.05)  # |error| ~ 5 standard errors at 200,000 draws
    assert abs(pay.sum()) < 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_shared_draws_keep_the_allocation(seed):
    from marketsched.mechanisms.online.ees_driver import EESPolicy

    rng = np.random.default_rng(seed)
    w = random_parallel_workload(rng, 50, 4)
    v = rng.integers(1, 40, len(w)).astype(float)
    d = rng.integers(0, 4, len(w)).astype(float)
    prior = TypePrior(Uniform(0.0, 40.0), Uniform(0.0, 4.0))
    for policy in (EESPolicy, RelaxedEESPolicy):
        runs = [Simulator(w, policy(v, d, prior, n_draws=20, seed=seed, time_unit=1.0, estimator=e)).run()
                for e in ("shared", "cached")]
        for name in ("first_start", "end_time", "state"):
            np.testing.assert_array_equal(getattr(runs[0], name), getattr(runs[1], name))
        assert abs(runs[0].payment.sum()) < 1e-6 * max(1.0, np.abs(runs[0].payment).sum())


@pytest.mark.parametrize("seed", range(200))
def test_list_profile_equals_the_array_profile(seed):
    from marketsched.mechanisms.online.ees_driver import profile_of
    from marketsched.mechanisms.online.profile import ListProfile, profile_kernel

    rng = np.random.default_rng(seed)
    capacity, origin = int(rng.integers(2, 9)), float(rng.integers(0, 4))
    k = int(rng.integers(0, 6))
    starts = (origin + rng.integers(0, 6, k)).astype(float)   # ties among starts and ends
    ends = starts + rng.integers(1, 5, k)
    nodes = rng.integers(1, 3, k)
    capacity = max(capacity, 2 * k)  # every interval fits, whatever their overlap
    ref = profile_of(capacity, origin, starts, ends, nodes)
    lst = ListProfile.of_intervals(capacity, origin, starts.tolist(), ends.tolist(), nodes.tolist())
    assert lst.times == ref.times.tolist() and lst.used == ref.used.tolist()
    compiled = profile_kernel()
    if compiled is not None:  # the lists built in C
        c = ListProfile.of_intervals(capacity, origin, starts.tolist(), ends.tolist(), nodes.tolist(), kernel=compiled)
        assert c.times == lst.times and c.used == lst.used
    for _ in range(int(rng.integers(0, 6))):
        s, d, n = float(rng.integers(int(origin), 12)), float(rng.integers(1, 5)), int(rng.integers(1, 3))
        outcome = []
        for p in (ref, lst):
            try:
                p.reserve(s, d, n)
                outcome.append("ok")
            except ValueError as exc:
                outcome.append(str(exc))
        assert outcome[0] == outcome[1]  # a refused one may leave split breakpoints behind: both alike
        assert lst.times == ref.times.tolist() and lst.used == ref.used.tolist()
    np.testing.assert_array_equal(greedy_starts([2.0, 1.0], [1, 2], ref.capacity, lst),
                                  greedy_starts([2.0, 1.0], [1, 2], ref.capacity, ref, fast=False))


def test_checked_snapshot_equals_the_validating_one():
    from marketsched.mechanisms.online.ees import QueueSnapshot

    cols = (np.array([4, 7, 9]), np.array([3.0, 0.5, 2.0]), np.array([0.0, 1.0, 2.0]), np.array([1.0, 5.0, 2.0]),
            np.array([1, 2, 1]))
    a, b = QueueSnapshot(*cols), QueueSnapshot.of_checked(*cols)
    for name in ("job_id", "value", "delay_cost", "runtime", "nodes"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert getattr(a, name).dtype == getattr(b, name).dtype
    assert len(b) == 3


def test_ees_drivers_refuse_an_infinite_declared_run_time_when_bound():
    from marketsched.mechanisms.online.ees_driver import EESPolicy

    with pytest.raises(ValueError, match="row 1 .* is inf"):  # the workload refuses it first
        Workload.from_columns(submit_time=[0.0, 1.0], runtime=[2.0, 3.0], runtime_estimate=[2.0, np.inf],
                              procs=[1, 1], capacity=2)
    w = Workload.from_columns(submit_time=[0.0, 1.0], runtime=[2.0, 3.0], runtime_estimate=[2.0, 3.0],
                              procs=[1, 1], capacity=2)
    estimates = w.runtime_estimate.copy()
    estimates[1] = np.inf  # past the workload's check (a column changed in place): the driver's own check
    object.__setattr__(w, "runtime_estimate", estimates)
    prior = TypePrior(Uniform(0.0, 4.0), Uniform(0.0, 1.0))
    for policy in (EESPolicy, RelaxedEESPolicy):
        with pytest.raises(ValueError, match="declared run time of row 1 is inf"):
            Simulator(w, policy([1.0, 2.0], [0.5, 0.5], prior, time_unit=1.0)).run()


# --------------------------------------------------------------------------- share markets: the compiled rounds
def random_share_workload(rng, n):
    """Whole seconds with ties: equal release times, equal and zero run times, CPUs 1-4; sometimes many at once."""
    crowd = rng.random() < 0.3  # more than 32 active jobs: the reference's tail cut and series
    submit = np.sort(rng.integers(0, 4 if crowd else n, n)).astype(float)
    runtime = rng.integers(0, 30, n).astype(float)
    procs = rng.integers(1, 5, n)
    return Workload.from_columns(submit_time=submit, runtime=runtime, procs=procs, capacity=int(procs.sum()))


def run_share(w, values, rule, basis, **kw):
    from marketsched.behaviour.learning import ZIC
    from marketsched.mechanisms.online.share import ShareMarketPolicy

    pol = ShareMarketPolicy(rule, ZIC(), values, capacity=6.0, rng=5, basis=basis, **kw)
    return Simulator(w, pol, capacity=int(w.procs.sum())).run(), pol


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_share_market_compiled_rounds_equal_the_reference(seed, rule):
    from marketsched.engine.compiled import kernel

    if kernel("marketsched.mechanisms.online._share_kernel") is None:
        pytest.skip("the share kernel is not built (or MARKETSCHED_ENGINE=python)")
    rng = np.random.default_rng(seed)
    w = random_share_workload(rng, int(rng.integers(1, 90)))
    values = rng.integers(1, 12, len(w)).astype(float) + (0.5 if seed % 4 == 0 else 0.0)  # ties; floor(v) bids
    basis = "per_cpu" if seed % 3 == 0 else "total"
    elements = int(rng.choice([7, 64, 1 << 20]))  # blocks and pieces cut small, or one block
    (a, pa), (b, pb), (c, pc) = (run_share(w, values, rule, basis, chunk_elements=elements),
                                 run_share(w, values, rule, basis, chunk_elements=elements, fast=False),
                                 run_share(w, values, rule, basis, chunk=False))
    assert pa._ends is not None and pb._ends is None and pc._ends is None  # the compiled path ran, the others not
    for ref, pol in ((b, pb), (c, pc)):
        assert_same_records(a, ref)  # payments: whole-number bids, exact in any order
        np.testing.assert_array_equal(pa.bidsum, pol.bidsum)
        np.testing.assert_allclose(pa.received, pol.received, rtol=1e-12, atol=0)
        assert pa.rounds == pol.rounds


# --------------------------------------------------------------------------- relaxed EES: the compiled greedy schedule
@pytest.mark.parametrize("seed", range(300))
def test_compiled_greedy_schedule_equals_the_lists(seed):
    from marketsched.engine.compiled import kernel
    from marketsched.mechanisms.online.profile import greedy_starts_lists

    k = kernel("marketsched.mechanisms.online._profile_kernel")
    if k is None:
        pytest.skip("the profile kernel is not built (or MARKETSCHED_ENGINE=python)")
    compiled = k.greedy_starts
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 9))
    p = random_profile(rng, capacity)
    k = int(rng.integers(0, 15))
    runtime = (rng.integers(1, 6, k) * (0.5 if seed % 3 == 0 else 1.0)).tolist()  # ties; halves on whole times
    nodes = rng.integers(1, capacity + 1, k).tolist()
    times, used = p.times.tolist(), p.used.tolist()
    got = compiled(times, used, capacity, runtime, nodes)
    assert (times, used) == (p.times.tolist(), p.used.tolist())  # read, not modified
    assert got == greedy_starts_lists(times, used, capacity, runtime, nodes)


def test_relaxed_ees_takes_the_compiled_schedule_unless_told_otherwise(monkeypatch):
    from marketsched.engine.compiled import kernel
    from marketsched.mechanisms.online.ees import RelaxedEES
    from marketsched.mechanisms.online.profile import greedy_starts_lists

    prior = TypePrior(Uniform(0.0, 1.0), Uniform(0.0, 1.0))
    built = kernel("marketsched.mechanisms.online._profile_kernel") is not None
    assert (RelaxedEES(prior, 4).schedule is not greedy_starts_lists) == built
    assert (RelaxedEES(prior, 4).kernel is not None) == built
    assert RelaxedEES(prior, 4, fast=False).schedule is greedy_starts_lists
    monkeypatch.setenv("MARKETSCHED_ENGINE", "python")
    assert RelaxedEES(prior, 4).schedule is greedy_starts_lists and RelaxedEES(prior, 4).kernel is None


# --------------------------------------------------------------------------- Egg: the compiled auctioneer
OUTCOME = ("provider", "slot", "completion", "price", "value", "surplus", "runtime", "row")
SCHEDULED: dict[int, int] = {}  # bids scheduled per seed of the random instances below


def random_linear_bids(rng, market, n):
    """Linear bids on whole numbers (ties in values, prices and times), some constant, some truncated."""
    from marketsched.mechanisms.online.egg import BidBatch

    a = np.full(n, market.now)
    desc = np.round(rng.uniform(0.0, 2.0, (n, market.estimators.n_attributes)))
    v0 = rng.integers(0, 25, n).astype(float)
    v1 = np.minimum(v0, rng.integers(0, 6, n))
    td = a + rng.integers(0, int(market.delta) + 3, n)
    t0 = np.where(rng.random(n) < 0.2, td, a)  # a zero span: the value is constant up to td
    view = rng.random((n, market.n_providers)) < 0.8 if rng.random() < 0.3 else None
    bids = BidBatch.linear(a, desc, v0, v1, td, min_reliability=rng.choice([0.0, 0.3, 0.9], n), t0=t0, view=view)
    if rng.random() < 0.3:  # a truncated report: worth 0 from its horizon on
        object.__setattr__(bids, "horizon", a + rng.integers(0, int(market.delta) + 2, n).astype(float))
    return bids


@pytest.mark.parametrize("seed", range(200))
def test_compiled_egg_auctioneer_equals_the_array_reference(seed):
    from marketsched.mechanisms.online.egg.auctioneer import auctioneer_kernel, clear
    from marketsched.mechanisms.online.egg.instances import random_market

    if auctioneer_kernel() is None:
        pytest.skip("the auctioneer kernel is not built (or MARKETSCHED_ENGINE=python)")
    rng = np.random.default_rng(seed)
    market, _ = random_market(rng, n_providers=int(rng.integers(1, 5)), n_resources=int(rng.integers(1, 3)),
                              delta=float(rng.choice([2.0, 4.0])), slot=float(rng.choice([0.5, 1.0])),
                              start=float(rng.integers(0, 4)) + (0.25 if seed % 2 else 0.0))
    market.book.prices[...] = np.round(market.book.prices)  # equal prices: ties within and across providers
    if market.n_providers > 1 and seed % 3 == 0:
        market.book.prices[1] = market.book.prices[0]
    bids = random_linear_bids(rng, market, int(rng.integers(1, 30)))
    Q = np.round(market.estimators.estimates(bids.description) * 2) / 2  # run times on half slots: ties
    r = market.estimators.runtimes(Q)
    el = market.eligibility(bids)
    fast = clear(bids, market.book, Q, el, r)
    SCHEDULED[seed] = int((fast.provider >= 0).sum())
    ref = clear(bids, market.book, Q, el, r, fast=False)
    for name in OUTCOME:
        np.testing.assert_array_equal(getattr(fast, name), getattr(ref, name), err_msg=name)


@pytest.mark.parametrize("fast", [True, False])
def test_both_egg_auctioneers_refuse_bad_inputs_alike(fast):
    from marketsched.mechanisms.online.egg.auctioneer import clear
    from marketsched.mechanisms.online.egg.instances import random_market

    rng = np.random.default_rng(3)
    market, _ = random_market(rng, n_providers=2, n_resources=2, start=2.0)
    bids = random_linear_bids(rng, market, 3)
    Q = market.estimators.estimates(bids.description)
    r = market.estimators.runtimes(Q)
    bad_r, bad_q = r.copy(), Q.copy()
    bad_r[1, 1] = -1.0
    bad_q[2, 0, 1] = np.nan
    with pytest.raises(ValueError, match=r"runtime must be finite, >= 0 and of shape \(3, 2\)"):
        clear(bids, market.book, Q, None, bad_r, fast=fast)
    with pytest.raises(ValueError, match="resource estimates must be numbers >= 0"):
        clear(bids, market.book, bad_q, None, r, fast=fast)
    early = bids.take([0, 1, 2])
    early.arrival[1] = 1.5
    with pytest.raises(ValueError, match="bid 1 arrives at 1.5, before the book's clock 2.0"):
        clear(early, market.book, Q, None, r, fast=fast)


def test_the_random_egg_instances_schedule_bids():
    """The comparison above is not vacuous: most instances schedule some bids (run after it, or alone)."""
    if len(SCHEDULED) < 200:
        for seed in range(200):
            test_compiled_egg_auctioneer_equals_the_array_reference(seed)
    assert sum(n > 0 for n in SCHEDULED.values()) > 100


@pytest.mark.parametrize("providers", ["mixed", "load-aware"])
def test_egg_on_the_builtin_jobs_equals_the_python_auctioneer(monkeypatch, providers):
    from marketsched.mechanisms.online.egg.auctioneer import auctioneer_kernel
    from marketsched.scenario import Scenario, run

    if auctioneer_kernel() is None:
        pytest.skip("the auctioneer kernel is not built (or MARKETSCHED_ENGINE=python)")
    jobs = Scenario.builtin(400, 16).build()
    a = run(jobs, "egg", {"providers": providers})
    monkeypatch.setenv("MARKETSCHED_ENGINE", "python")
    b = run(jobs, "egg", {"providers": providers})
    assert_same_records(a.records, b.records)
    for name in ("provider", "price", "completion", "paid", "crashed", "dropped"):
        np.testing.assert_array_equal(getattr(a.policy, name), getattr(b.policy, name), err_msg=name)
    assert (a.policy.provider >= 0).sum() > 100


# --------------------------------------------------------------------------- relaxed EES: the shared payments in C
def draw_priors(rng, k_value, k_delay):
    """Priors the compiled draws cover: equally likely points on whole numbers (ties among the points), or
    uniform when k is 0; k = 1 (no draw), 256 (bytes without rejection) and 300 (32-bit words) included."""
    from marketsched.mechanisms.online.ees import EqualPoints

    def one(k, scale):
        if k == 0:
            return Uniform(0.0, scale)
        return EqualPoints(tuple(rng.integers(0, scale + 1, k).astype(float).tolist()), tuple([1.0 / k] * k))
    return TypePrior(one(k_value, 40.0), one(k_delay, 3.0))


@pytest.mark.parametrize("seed", range(120))
def test_compiled_shared_payments_equal_the_numpy_estimator(seed):
    from marketsched.mechanisms.online.ees import (
        compiled_draws_spec,
        expected_externality_payments,
        shared_payments_compiled,
    )
    from marketsched.mechanisms.online.profile import profile_kernel

    kernel = profile_kernel()
    if kernel is None:
        pytest.skip("the profile kernel is not built (or MARKETSCHED_ENGINE=python)")
    rng = np.random.default_rng(seed)
    ks = (0, 1, 2, 5, 64, 255, 256, 300)
    prior = draw_priors(rng, int(rng.choice(ks)), int(rng.choice(ks)))
    m = int(rng.integers(1, 40))
    S = int(rng.choice([1, 7, 8, 9, 20, 100, 129, 300]))
    d = rng.integers(0, 4, m).astype(float)            # ties among the reports and with the prior's points
    w = rng.integers(-2, 6, m).astype(float) * 0.5      # delays: some negative, some zero
    v0 = float(rng.integers(0, 30))
    spec = compiled_draws_spec(prior)
    assert spec is not None
    g1, g2 = np.random.default_rng(seed + 7), np.random.default_rng(seed + 7)
    g1.random(int(seed % 3))  # a 32-bit half-word left in PCG64's buffer on some seeds
    g2.random(int(seed % 3))
    if seed % 2:
        g1.integers(0, 2**32, dtype=np.uint32)
        g2.integers(0, 2**32, dtype=np.uint32)
    got_pay, got_xi = shared_payments_compiled(kernel, spec, v0, d, w, S, g1)
    want_pay, want_xi = expected_externality_payments(v0, d, w, prior, S, g2, "shared")
    np.testing.assert_array_equal(got_xi, want_xi)
    np.testing.assert_array_equal(got_pay, want_pay)
    assert g1.bit_generator.state == g2.bit_generator.state  # the same draws consumed


def test_compiled_shared_payments_only_for_the_priors_and_estimator_they_reproduce(monkeypatch):
    from marketsched.mechanisms.online.ees import Discrete, RelaxedEES, compiled_draws_spec
    from marketsched.mechanisms.online.profile import profile_kernel

    built = profile_kernel() is not None
    prior = draw_priors(np.random.default_rng(0), 3, 0)
    assert (RelaxedEES(prior, 4, estimator="shared").draws_spec is not None) == built
    assert RelaxedEES(prior, 4, estimator="cached").draws_spec is None
    assert RelaxedEES(prior, 4, estimator="shared", fast=False).draws_spec is None
    assert compiled_draws_spec(TypePrior(Discrete((0.0, 1.0), (0.5, 0.5)), Uniform(0.0, 1.0))) is None
    assert compiled_draws_spec(TypePrior(Uniform(-1e308, 1e308), Uniform(0.0, 1.0))) is None  # numpy refuses it
    monkeypatch.setenv("MARKETSCHED_ENGINE", "python")
    assert RelaxedEES(prior, 4, estimator="shared").draws_spec is None


@pytest.mark.parametrize("seed", range(8))
def test_relaxed_ees_shared_payments_compiled_equal_the_reference(seed):
    rng = np.random.default_rng(seed)
    w = random_parallel_workload(rng, 60, int(rng.integers(2, 9)))
    v = rng.integers(1, 40, len(w)).astype(float)
    d = rng.integers(0, 4, len(w)).astype(float)
    prior = draw_priors(rng, int(rng.choice([0, 1, 16, 300])), int(rng.choice([0, 4, 256])))
    runs = []
    for fast in (True, False):
        pol = RelaxedEESPolicy(v, d, prior, n_draws=20, seed=seed, time_unit=1.0, estimator="shared", fast=fast)
        runs.append((Simulator(w, pol).run(), pol))
    (a, pa), (b, pb) = runs
    assert_same_records(a, b)
    assert len(pa.ledger.rows) == len(pb.ledger.rows) and max(pa.queue_lengths) > 2
    for (_, _, x), (_, _, y) in zip(pa.ledger.rows, pb.ledger.rows):
        np.testing.assert_array_equal(x.payments, y.payments)
        np.testing.assert_array_equal(x.welfare_of_others, y.welfare_of_others)


def test_relaxed_ees_on_the_builtin_jobs_equals_the_python_path(monkeypatch):
    from marketsched.scenario import Scenario, in_form, run

    jobs, _ = in_form(Scenario.builtin(400, 16).build(), "relaxed-ees")
    a = run(jobs, "relaxed-ees")
    if a.policy.mechanism.draws_spec is None:
        pytest.skip("the profile kernel is not built (or MARKETSCHED_ENGINE=python)")
    monkeypatch.setenv("MARKETSCHED_ENGINE", "python")
    b = run(jobs, "relaxed-ees")
    assert b.policy.mechanism.draws_spec is None
    assert_same_records(a.records, b.records)
    assert np.count_nonzero(a.records.payment) > 100
