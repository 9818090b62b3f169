"""Proportional Share and Sanghavi-Hajek (Stößer 2009, chapter 6): rules, equilibria,
reservations, market loop.

Worked examples are exact tests (Table 6.1, section 6.5.3); Lemmas 2-3 and Theorems 1-2 become
property tests over random value pairs, with the equilibria checked against numerical best
responses under the general allocation rules (not against the closed forms themselves).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from marketsched.behaviour.learning import ZIC, QLearning
from marketsched.mechanisms.online import share as sm
from marketsched.workloads import Workload

SQRT2M1 = math.sqrt(2.0) - 1.0
values = st.floats(min_value=0.05, max_value=1000.0, allow_nan=False, allow_infinity=False)


def pair(a: float, b: float) -> tuple[float, float]:
    return (a, b) if a <= b else (b, a)


# ============================================================================ Table 6.1
def r3(x: float) -> float:
    """Round half up to 3 decimals, as the thesis prints."""
    return math.floor(x * 1000 + 0.5) / 1000


def test_table_6_1_sanghavi_hajek_exactly():
    out = sm.two_user_equilibrium(2.1, 5.0, "sh")
    printed = {
        "bids": (0.441, 1.05), "shares": (0.21, 0.79), "unit_prices": (2.1, 1.329), "utilities": (0.0, 2.9),
    }
    for key, vals in printed.items():
        for ours, theirs in zip(getattr(out, key), vals):
            assert r3(ours) == pytest.approx(theirs, abs=1e-12), key
    assert r3(out.revenue) == pytest.approx(1.491)
    assert r3(out.efficiency) == pytest.approx(4.391)
    assert round(100 * out.ratio, 2) == pytest.approx(87.82)
    assert out.optimum == 5.0


def test_table_6_1_proportional_share_exactly_and_the_thesis_rounding():
    out = sm.two_user_equilibrium(2.1, 5.0, "ps")
    # entries the thesis rounds correctly
    assert [r3(b) for b in out.bids] == pytest.approx([0.437, 1.041])
    assert [r3(x) for x in out.shares] == pytest.approx([0.296, 0.704])
    assert r3(out.efficiency) == pytest.approx(4.142)
    # uniform unit price = revenue = v_l v_h / (v_l + v_h) = 1.47887...
    assert out.unit_prices[0] == pytest.approx(out.unit_prices[1], rel=1e-14)
    assert out.revenue == pytest.approx(10.5 / 7.1, rel=1e-14)
    # the thesis prints 1.478, 0.185 and 2.479: sums of its 3-decimal intermediates (exact values
    # are 1.4789, 0.1837 and 2.4797)
    b3 = [r3(b) for b in out.bids]
    x3 = [r3(x) for x in out.shares]
    assert r3(sum(b3)) == pytest.approx(1.478)
    assert r3(2.1 * x3[0] - b3[0]) == pytest.approx(0.185)
    assert r3(5.0 * x3[1] - b3[1]) == pytest.approx(2.479)
    assert round(100 * r3(out.efficiency) / 5.0, 2) == pytest.approx(82.84)
    assert out.utilities == pytest.approx([2.1**3 / 7.1**2, 5.0**3 / 7.1**2], rel=1e-13)


# ============================================================================ section 6.3 as properties
@settings(max_examples=120, deadline=None)
@given(values, values, st.sampled_from(["ps", "sh"]))
def test_two_user_equilibria_are_nash_equilibria_of_the_general_rules(a, b, rule):
    v_l, v_h = pair(a, b)
    assume(v_h / v_l < 1e3)
    out = sm.two_user_equilibrium(v_l, v_h, rule)
    for j in (0, 1):
        others = [out.bids[1 - j]]
        _, best = sm.best_response(out.values[j], others, rule)
        assert out.utilities[j] >= best - 1e-9 * v_h, (j, out.utilities[j], best)
    # closed forms of Lemmas 2 and 3
    if rule == "sh":
        assert out.shares == pytest.approx([v_l / (2 * v_h), 1 - v_l / (2 * v_h)], rel=1e-12)
        assert out.utilities[0] == pytest.approx(0.0, abs=1e-12 * v_h)
        assert out.utilities[1] == pytest.approx(v_h - v_l, rel=1e-12, abs=1e-12 * v_h)
        assert out.revenue == pytest.approx((v_l**2 + v_l * v_h) / (2 * v_h), rel=1e-12)
        p = out.unit_prices
        assert p[0] >= p[1] * (1 - 1e-12)  # the low bidder pays the higher unit price
    else:
        assert out.shares == pytest.approx([v_l / (v_l + v_h), v_h / (v_l + v_h)], rel=1e-12)
        assert out.revenue == pytest.approx(v_l * v_h / (v_l + v_h), rel=1e-12)
        assert out.unit_prices[0] == pytest.approx(out.unit_prices[1], rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(values, values)
def test_theorem_1_revenue_comparison(a, b):
    v_l, v_h = pair(a, b)
    assume(abs(v_l / v_h - SQRT2M1) > 1e-9)
    sh = sm.two_user_equilibrium(v_l, v_h, "sh").revenue
    ps = sm.two_user_equilibrium(v_l, v_h, "ps").revenue
    assert (sh > ps) == (v_l > SQRT2M1 * v_h)


@settings(max_examples=200, deadline=None)
@given(values, values)
def test_theorem_2_efficiency_comparison_and_worst_cases(a, b):
    v_l, v_h = pair(a, b)
    sh = sm.two_user_equilibrium(v_l, v_h, "sh")
    ps = sm.two_user_equilibrium(v_l, v_h, "ps")
    assert sh.efficiency >= ps.efficiency * (1 - 1e-12)
    # the two-user competitive ratios the thesis cites: SH 87.5%, PS 2 sqrt 2 - 2 = 82.84%
    assert sh.ratio >= 0.875 - 1e-12
    assert ps.ratio >= 2 * math.sqrt(2) - 2 - 1e-12


def test_worst_cases_are_attained():
    sh = sm.two_user_equilibrium(0.5, 1.0, "sh")  # v_l = v_h / 2
    ps = sm.two_user_equilibrium(SQRT2M1, 1.0, "ps")  # v_l = (sqrt 2 - 1) v_h
    assert sh.ratio == pytest.approx(0.875, rel=1e-14)
    assert ps.ratio == pytest.approx(2 * math.sqrt(2) - 2, rel=1e-12)
    # equal values: SH extracts v (both bid v/2), PS half of it
    assert sm.two_user_equilibrium(3.0, 3.0, "sh").revenue == pytest.approx(3.0, rel=1e-14)
    assert sm.two_user_equilibrium(3.0, 3.0, "ps").revenue == pytest.approx(1.5, rel=1e-14)


def test_lemma_1_no_distorted_equilibrium():
    """Against the equilibrium bid of the high user, the low user never gains by outbidding it."""
    v_l, v_h = 2.0, 3.0
    out = sm.two_user_equilibrium(v_l, v_h, "sh")
    for b in np.linspace(out.bids[1] * 1.001, v_l, 50):
        u = v_l * sm.sh_shares([b, out.bids[1]])[0] - b
        assert u <= out.utilities[0] + 1e-12


# ============================================================================ SH rule
bid_vectors = st.lists(st.floats(min_value=0.01, max_value=1e4, allow_nan=False), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(bid_vectors)
def test_sh_shares_sum_to_one_and_are_symmetric_and_scale_free(bids):
    b = np.array(bids)
    x = sm.sh_shares(b)
    assert x.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(x >= 0)
    perm = np.random.default_rng(len(bids)).permutation(len(b))
    assert sm.sh_shares(b[perm]) == pytest.approx(x[perm], rel=1e-11, abs=1e-15)
    assert sm.sh_shares(b * 7.3) == pytest.approx(x, rel=1e-11, abs=1e-15)


@settings(max_examples=150, deadline=None)
@given(bid_vectors, st.integers(0, 59), st.floats(min_value=1.0001, max_value=10.0))
def test_sh_share_is_monotone_in_the_own_bid(bids, j, factor):
    b = np.array(bids)
    j %= len(b)
    up = b.copy()
    up[j] *= factor
    assert sm.sh_shares(up)[j] >= sm.sh_shares(b)[j] * (1 - 1e-12)
    if len(b) > 1:
        assert sm.sh_shares(up)[j] > sm.sh_shares(b)[j]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=1, max_size=9))
def test_sh_shares_equal_exact_rational_integral(bids):
    exact = sm.sh_shares_rational(bids)
    assert sum(exact) == 1
    ours = sm.sh_shares(np.array(bids, dtype=float), method="direct")
    assert ours == pytest.approx([float(f) for f in exact], rel=1e-13, abs=1e-16)


@settings(max_examples=100, deadline=None)
@given(values, values)
def test_sh_two_user_closed_form(a, b):
    lo, hi = pair(a, b)
    x_l, x_h, p_l, p_h = sm.sh_two_users(lo, hi)
    assert sm.sh_shares([lo, hi]) == pytest.approx([x_l, x_h], rel=1e-14)
    assert sm.sh_shares([hi, lo]) == pytest.approx([x_h, x_l], rel=1e-14)
    assert sm.unit_prices([lo, hi], [x_l, x_h]) == pytest.approx([p_l, p_h], rel=1e-13)
    # the general (n >= 3 code path) agrees once a zero bid is added
    assert sm.sh_shares([lo, hi, 0.0])[:2] == pytest.approx([x_l, x_h], rel=1e-13)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(min_value=0.1, max_value=100.0), min_size=2, max_size=40))
def test_corollary_1_lowest_bidder_pays_the_highest_unit_price(bids):
    b = np.array(bids)
    p = sm.unit_prices(b, sm.sh_shares(b))
    assert p[np.argmin(b)] >= p.max() * (1 - 1e-12)
    assert np.all(np.diff(p[np.argsort(b)]) <= 1e-9 * p.max())  # unit price falls as the bid rises


@pytest.mark.parametrize("n", [250, 600, 1000])
def test_sh_series_and_direct_agree_for_many_bidders(n):
    rng = np.random.default_rng(n)
    b = rng.uniform(1, 100, (3, n))
    d = sm.sh_shares(b, method="direct")
    s = sm.sh_shares(b, method="series")
    assert s == pytest.approx(d, rel=1e-12)
    assert d.sum(axis=-1) == pytest.approx(np.ones(3), abs=1e-13)


@pytest.mark.parametrize("top", [1, 2])
def test_sh_series_with_dominant_bids(top):
    """One (or two tied) bids far above the rest: no tail cut, the series runs below the top."""
    rng = np.random.default_rng(top)
    b = np.r_[rng.uniform(1, 10, 600 - top), np.full(top, 5000.0)]
    d = sm.sh_shares(b, method="direct")
    s = sm.sh_shares(b, method="series")
    assert s == pytest.approx(d, rel=1e-12)
    assert s.sum() == pytest.approx(1.0, abs=1e-14)
    small = np.r_[np.arange(1, 9), [100.0] * top]  # the same path on a vector the rationals can check
    exact = [float(f) for f in sm.sh_shares_rational(small.astype(int).tolist())]
    plan = sm._series_plan(small / small.max(), sm._tail_cut(np.sum(small / small.max())))
    assert plan is not None
    assert sm._sh_series(small / small.max(), *plan) == pytest.approx(exact, rel=1e-13)
    mixed = np.stack([b, rng.uniform(1, 100, 600)])  # rows needing different paths: auto falls back
    assert sm.sh_shares(mixed)[0] == pytest.approx(d, rel=1e-12)


def test_sh_series_with_a_few_large_bids():
    """Several bids near the top, many far below: the large ones are multiplied out directly."""
    rng = np.random.default_rng(7)
    b = np.r_[rng.uniform(1, 10, 595), [6000.0, 7000.0, 8000.0, 9000.0, 10_000.0]]
    d = sm.sh_shares(b, method="direct")
    assert sm.sh_shares(b, method="series") == pytest.approx(d, rel=1e-12)
    assert sm.sh_shares(b) == pytest.approx(d, rel=1e-12)
    small = np.r_[np.arange(1, 9), [40, 80, 100]].astype(float)
    a = small / small.max()
    plan = sm._series_plan(a, sm._tail_cut(a.sum()))
    assert plan is not None and plan[2].sum() == 2  # 40 is below half the top: in the series
    exact = [float(f) for f in sm.sh_shares_rational(small.astype(int).tolist())]
    assert sm._sh_series(a, *plan) == pytest.approx(exact, rel=1e-13)


def _exact_share(bids: list[int], j: int) -> Fraction:
    top = max(bids)
    coef = [Fraction(1)]
    for k, b in enumerate(bids):
        if k != j:
            ak = Fraction(b, top)
            coef = [c - ak * p for c, p in zip(coef + [Fraction(0)], [Fraction(0)] + coef)]
    return Fraction(bids[j], top) * sum(c / (i + 1) for i, c in enumerate(coef))


def test_sh_exact_against_rational_with_many_comparable_bidders():
    bids = list(range(50, 130))  # A = 55.5: the tail cut drops nodes here
    assert sm._tail_cut(np.sum(np.array(bids) / 129)) < 1.0
    ours = sm.sh_shares(np.array(bids, float), method="direct")
    for j in (0, 40, 79):
        assert ours[j] == pytest.approx(float(_exact_share(bids, j)), rel=1e-13)


def test_ps_shares_and_batches():
    b = np.array([[1.0, 3.0], [2.0, 2.0]])
    np.testing.assert_allclose(sm.ps_shares(b), [[0.25, 0.75], [0.5, 0.5]], rtol=1e-15)
    x = sm.sh_shares(np.array([[1.0, 2.0, 3.0], [3.0, 3.0, 3.0]]))
    np.testing.assert_allclose(x[1], [1 / 3] * 3, rtol=1e-14)
    np.testing.assert_allclose(x[0], [7 / 54, 16 / 54, 31 / 54], rtol=1e-14)


@pytest.mark.parametrize("bad, msg", [([1.0, -1.0], ">= 0"), ([1.0, np.nan], "finite"), ([0.0, 0.0], "positive"), ([], "at least one")])
def test_bad_bids_are_rejected(bad, msg):
    for fn in (sm.ps_shares, sm.sh_shares):
        with pytest.raises(ValueError, match=msg):
            fn(bad)


def test_unknown_rule_and_method():
    with pytest.raises(ValueError, match="unknown allocation rule"):
        sm.shares("vickrey", [1.0])
    with pytest.raises(ValueError, match="method"):
        sm.sh_shares([1.0, 2.0, 3.0], method="simpson")
    with pytest.raises(ValueError, match="series ratio"):  # a batch of 40 comparable bids: no cut, ratio ~1
        sm.sh_shares(np.tile(np.arange(1.0, 41.0), (2, 1)), method="series")


# ============================================================================ reservations (6.5.3)
def test_reservation_example_of_section_6_5_3():
    first = sm.reservation_round([10.0, 20.0], [0.4, 0.3])
    assert first.sh_shares == pytest.approx([0.075, 0.225], rel=1e-13)
    assert first.unit_price == pytest.approx(400 / 3, rel=1e-13)
    assert first.revenue == pytest.approx(30 + 0.7 * 400 / 3, rel=1e-13)
    assert round(first.unit_price, 2) == 133.33 and round(first.revenue, 2) == 123.33
    second = sm.reservation_round([10.0, 20.0, 30.0], [0.4, 0.3])
    exact = sm.sh_shares_rational([10, 20, 30])
    assert exact == [Fraction(7, 54), Fraction(16, 54), Fraction(31, 54)]
    assert second.sh_shares == pytest.approx([0.3 * float(f) for f in exact], rel=1e-13)
    assert second.unit_price == pytest.approx(1800 / 7, rel=1e-13)  # 257.142857...
    assert second.revenue == pytest.approx(240.0, rel=1e-13)
    assert (round(second.unit_price, 2), round(second.revenue, 2)) == (257.14, 240.0)
    # the thesis's 256.41 and 239.49 come from rounding the low share to 3.9%
    rounded = round(second.sh_shares[0], 3)
    assert rounded == 0.039
    assert round(10 / rounded, 2) == 256.41
    assert round(60 + 0.7 * round(10 / rounded, 2), 2) == 239.49
    assert second.case == "sh" and second.admitted.all()
    assert second.res_payments == pytest.approx([0.4 * 1800 / 7, 0.3 * 1800 / 7])


def test_reservation_special_cases():
    # no pay-as-bid requests, everything served: the provider's reserve price
    out = sm.reservation_round([], [0.5, 0.3], reserve_price=2.0)
    assert out.case == "no_sh" and out.unit_price == 2.0 and out.revenue == pytest.approx(1.6)
    # some cannot be served: reserve price x sum(all) / sum(served)
    out = sm.reservation_round([], [0.6, 0.5, 0.3], reserve_price=2.0)
    assert out.admitted.tolist() == [True, False, True]  # first fit in request order
    assert out.case == "no_sh_scarce"
    assert out.unit_price == pytest.approx(2.0 * 1.4 / 0.9)
    assert out.res_payments[1] == 0.0
    # reservations fill the resource: pay-as-bid requests are not served this round
    out = sm.reservation_round([5.0], [0.7, 0.3], reserve_price=1.0)
    assert out.sh_shares == pytest.approx([0.0]) and out.unit_price == 1.0 and out.revenue == pytest.approx(1.0)
    assert sm.admit_reservations([0.1, 0.2, 0.7]).all()
    with pytest.raises(ValueError, match="reserve_price"):
        sm.reservation_round([], [0.5])
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        sm.reservation_round([1.0], [1.5])


# ============================================================================ one second, many requests
@settings(max_examples=80, deadline=None)
@given(st.integers(1, 30), st.integers(0, 10_000), st.sampled_from(["ps", "sh"]), st.sampled_from(["total", "per_cpu"]))
def test_market_round_feasible_and_pay_as_bid(n, seed, rule, basis):
    rng = np.random.default_rng(seed)
    bids = rng.uniform(1, 50, n)
    c = rng.integers(1, 9, n).astype(float)
    x, pay = sm.market_round(rule, bids, c, 10.0, basis=basis)
    assert np.all(x <= c + 1e-12) and x.sum() <= 10.0 + 1e-9
    assert pay == pytest.approx(bids * c)
    tau = sm.shares(rule, bids * c if basis == "total" else bids)
    assert x == pytest.approx(np.minimum(c, 10.0 * tau))  # the excess is wasted, not redistributed


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(0, 10_000))
def test_fractional_optimum_matches_linear_programme(n, seed):
    from scipy.optimize import linprog

    rng = np.random.default_rng(seed)
    v = rng.integers(10, 61, n).astype(float)
    c = rng.integers(1, 9, n).astype(float)
    lp = linprog(-v, A_ub=np.ones((1, n)), b_ub=[10.0], bounds=list(zip([0] * n, c)), method="highs")
    assert sm.fractional_optimum(v, c, 10.0) == pytest.approx(-lp.fun, rel=1e-9)


# ============================================================================ the online setting
def small_workload(seed=3, n=40, horizon=300, max_run=120):
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.integers(0, horizon, n))
    runtime = rng.integers(0, max_run, n)
    cpus = rng.integers(1, 9, n)
    return Workload.from_columns(submit_time=submit, runtime=runtime, procs=cpus, capacity=10)


def test_market_plan_segments_match_per_second_active_sets():
    w = small_workload()
    plan = sm.MarketPlan.from_workload(w)
    r, d = plan.submit, plan.runtime
    seen = {}
    for t0, t1, rows in plan.segments:
        assert t1 > t0 and len(rows)
        for t in range(t0, t1):
            seen[t] = rows.tolist()
    for t in range(int(r.min()), int((r + d).max()) + 1):
        active = np.flatnonzero((r <= t) & (t < r + d)).tolist()
        assert seen.get(t, []) == active, t
    assert plan.rounds == len(seen)


def test_market_plan_rejects_fractional_seconds_and_bad_rows():
    with pytest.raises(ValueError, match=r"submit must be whole numbers .*row 1 "):
        sm.MarketPlan.from_arrays([0, 1.5], [3, 3], [1, 1])
    with pytest.raises(ValueError, match="cpus must be >= 1; row 0"):
        sm.MarketPlan.from_arrays([0, 1], [3, 3], [0, 1])
    with pytest.raises(ValueError, match="release order"):
        sm.MarketPlan.from_arrays([5, 1], [3, 3], [1, 1])


@pytest.mark.parametrize("rule", ["ps", "sh"])
@pytest.mark.parametrize("make", [ZIC, lambda: QLearning(low=10, high=60)], ids=["zic", "qlearning"])
def test_vectorised_loop_equals_engine_policy(rule, make):
    w = small_workload()
    values = np.random.default_rng(9).integers(10, 61, (3, len(w))).astype(float)
    plan = sm.MarketPlan.from_workload(w)
    res = sm.simulate(plan, values, rule, make(), capacity=10, seeds=[11, 12, 13])
    for b in range(3):
        records, policy = sm.run_on_engine(w, values[b], rule, make(), capacity=10, rng=11 + b)
        assert records.counts()["completed"] == len(w)
        np.testing.assert_allclose(policy.received, res.received[b], rtol=1e-12)
        np.testing.assert_allclose(records.payment, res.paid[b], rtol=1e-12)
        assert policy.revenue == pytest.approx(res.revenue[b], rel=1e-12)
        assert policy.rounds == plan.rounds


@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_engine_policy_chunks_seconds_without_changing_the_market(rule):
    """ZIC bids without state: the policy meters whole segments at once; same bids, same shares."""
    from marketsched.engine.simulator import Simulator

    w = small_workload(seed=3)
    values = np.random.default_rng(4).integers(10, 61, len(w)).astype(float)
    out = {}
    for chunk in (True, False):
        policy = sm.ShareMarketPolicy(rule, ZIC(), values, capacity=10, rng=7, chunk=chunk, chunk_elements=50)
        records = Simulator(w, policy, capacity=int(w.procs.sum())).run()
        out[chunk] = (records, policy)
    (r1, p1), (r0, p0) = out[True], out[False]
    assert p1.rounds == p0.rounds and p1.chunk and not p0.chunk
    np.testing.assert_allclose(p1.received, p0.received, rtol=1e-12)
    np.testing.assert_allclose(r1.payment, r0.payment, rtol=1e-12)
    np.testing.assert_array_equal(r1.end_time, r0.end_time)


def test_simulate_is_deterministic_and_chunking_invariant():
    w = small_workload(seed=5)
    plan = sm.MarketPlan.from_workload(w)
    values = np.random.default_rng(2).integers(10, 161, (4, len(w))).astype(float)
    rules = ["ps", "sh", "ps", "sh"]

    def q():
        return QLearning(alpha=[0.1, 0.3, 0.5, 0.7], gamma=0.3, epsilon=[0.05, 0.05, 0.25, 0.15], low=10, high=160)

    a = sm.simulate(plan, values, rules, q(), seeds=range(4))
    b = sm.simulate(plan, values, rules, q(), seeds=range(4), chunk_elements=7)
    # same decisions; totals are summed in chunk-sized groups, hence rtol instead of bit equality
    np.testing.assert_allclose(a.received, b.received, rtol=1e-12)
    np.testing.assert_allclose(a.paid, b.paid, rtol=1e-12)
    np.testing.assert_allclose(a.win_pct, b.win_pct, rtol=1e-12)  # sums grouped differently
    # a row of a batch equals the same run alone (per-row parameters, rules and generators)
    alone = sm.simulate(plan, values[2:3], "ps", QLearning(alpha=0.5, gamma=0.3, epsilon=0.25, low=10, high=160), seeds=[2])
    np.testing.assert_allclose(alone.paid[0], a.paid[2], rtol=1e-12)


def test_market_result_metrics_are_consistent():
    w = small_workload(seed=7)
    plan = sm.MarketPlan.from_workload(w)
    v = np.random.default_rng(4).integers(10, 61, len(w)).astype(float)
    values = np.stack([v, v])
    res = sm.simulate(plan, values, ["ps", "sh"], ZIC(), seeds=[1, 1])
    assert np.all(res.efficiency <= 1 + 1e-12) and np.all(res.efficiency > 0)
    assert res.revenue[0] == res.revenue[1]  # ZIC with common random numbers: same bids
    assert res.utility.sum(axis=1) == pytest.approx(res.welfare - res.revenue)
    # window sums add up to the totals
    assert res.win_reqsec.sum() == sum((t1 - t0) * len(r) for t0, t1, r in plan.segments)
    assert res.win_seconds.sum() == plan.rounds
    assert res.win_demand.sum() == pytest.approx(plan.demand().sum())
    bids_over_v = res.win_pct.sum(axis=1)
    assert np.all(bids_over_v <= res.win_reqsec.sum() + 1e-9)  # ZIC bids never exceed the value
    rho = res.spearman()
    assert rho.shape == (2,) and np.all(np.abs(rho) <= 1)


def test_zic_revenue_equal_under_ps_and_sh_within_tolerance():
    """The thesis's sanity check (Table 6.5, ZIC): independent bid draws, same values.

    Revenue is a sum of independent bids; its variance is known exactly,
    ``Var = sum over request-seconds of c_j^2 (v_j^2 - 1) / 12``, so the tolerance is 5 standard
    deviations of the difference of two independent runs (3% on this small slice; on the
    reproduction's 2.9M request-seconds it is 0.3%, and the thesis's ratio prints as 1.000).
    """
    w = small_workload(seed=11, n=120, horizon=2000, max_run=400)
    plan = sm.MarketPlan.from_workload(w)
    v = np.random.default_rng(8).integers(10, 61, len(w)).astype(float)
    res = sm.simulate(plan, np.stack([v, v]), ["ps", "sh"], ZIC(), seeds=[101, 202])
    c = plan.cpus.astype(float)
    var = float((plan.runtime * c**2 * (v**2 - 1) / 12).sum())
    mean = float((plan.runtime * c * (v + 1) / 2).sum())
    diff = res.revenue[0] - res.revenue[1]
    assert abs(diff) < 5 * math.sqrt(2 * var)
    assert abs(res.revenue[0] - mean) < 5 * math.sqrt(var)
    assert 5 * math.sqrt(2 * var) / mean < 0.04  # the test has power: the bound is tight
    # same draws: identical revenue (common random numbers), different utilities
    crn = sm.simulate(plan, np.stack([v, v]), ["ps", "sh"], ZIC(), seeds=[101, 101])
    assert crn.revenue[0] == crn.revenue[1] == res.revenue[0]
    assert not np.array_equal(crn.received[0], crn.received[1])


def test_simulate_rejects_bad_input():
    w = small_workload()
    plan = sm.MarketPlan.from_workload(w)
    v = np.full((1, len(w)), 20.0)
    with pytest.raises(ValueError, match="columns"):
        sm.simulate(plan, v[:, :-1], "ps", ZIC(), seeds=[0])
    with pytest.raises(ValueError, match="one seed"):
        sm.simulate(plan, v, "ps", ZIC(), seeds=[0, 1])
    with pytest.raises(ValueError, match="basis"):
        sm.simulate(plan, v, "ps", ZIC(), seeds=[0], basis="per_job")
    with pytest.raises(ValueError, match="unknown allocation rule"):
        sm.simulate(plan, v, "hb", ZIC(), seeds=[0])


def test_truncated_plan_keeps_a_prefix_of_rounds():
    plan = sm.MarketPlan.from_workload(small_workload())
    cut = plan.truncated(100)
    assert cut.rounds == 100
    demand = plan.demand()
    assert np.array_equal(cut.demand(), demand[:len(cut.demand())])
    assert set(cut.active_rows()) <= set(plan.active_rows())
    assert plan.truncated(10**9).rounds == plan.rounds
    with pytest.raises(ValueError, match="whole number"):
        plan.truncated(-1)


def test_reproduction_batches_share_random_numbers_and_run():
    from marketsched.experiments import stoesser_ch6 as ex

    plan = sm.MarketPlan.from_workload(small_workload(seed=2, n=20, horizon=100, max_run=60))
    jobs = ex.make_jobs(plan, 2, 2, [{"alpha": 0.3, "gamma": 0.3, "epsilon": 0.05}])
    both = next(j for j in jobs if j["id"] == "Q-learning and grid (C=10)")
    q = dict(both, rows=[r for r in both["rows"] if r["strategy"] == "q" and r["dist"] == "wide"])
    ps = [r["seed"] for r in q["rows"] if r["rule"] == "ps"]
    sh = [r["seed"] for r in q["rows"] if r["rule"] == "sh"]
    assert ps == sh and len(set(map(tuple, ps))) == 2  # same stream for PS and SH, one per workload
    out = ex.run_batch(q)
    assert len(out["rows"]) == 4 and all(0 < r["efficiency"] <= 1 for r in out["rows"])
    # a run's results do not depend on the other runs of its batch (the experiment merges batches)
    alone = ex.run_batch(dict(q, rows=q["rows"][1:2], series_of=[]))["rows"][0]
    assert alone == out["rows"][1]
    # the optimum stored by the runs is the capped one recomputed beside the uncapped reading (C max v)
    opt = ex.uncapped_optima(plan, 2, (10,))
    row = opt[(opt.dist == "wide") & (opt.workload == 0)].iloc[0]
    assert row.optimum == pytest.approx(out["rows"][0]["optimum"]) and row.uncapped >= row.optimum
    zic = ex.run_batch(jobs[0])
    rev = {(r["strategy"], r["dist"], r["workload"], r["rule"]): r["revenue"] for r in zic["rows"]}
    assert rev[("zic", "wide", 1, "ps")] == rev[("zic", "wide", 1, "sh")]
    assert rev[("zic", "wide", 1, "sh")] != rev[("zic-independent", "wide", 1, "sh")]
    assert ex.sign_test(np.ones(30)) == pytest.approx(2 * 0.5**30)
    assert ex.sign_test(np.r_[np.ones(15), -np.ones(15), 0.0]) == 1.0


@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_audit_value_lies_reach_the_share_bidders(rule):
    """A value lie under `marketsched audit` is the value the job's ZIC bidder bids from (its
    report), while its utility keeps the true value: three jobs of values 4, 9, 20 for 6 seconds
    on one CPU, the 20 shading to 10 gains, doubling to 40 loses (before, the bidders bid from
    the true values and every value lie changed nothing)."""
    from marketsched.analysis.audit import Deviation, audit
    from marketsched.scenario import Jobs

    values = np.array([4.0, 9.0, 20.0])
    w = Workload.from_columns(submit_time=np.zeros(3), runtime=np.full(3, 6.0), capacity=1)
    table = audit(Jobs.from_bids(w, values, seed=1), rule, None, [Deviation("value", 0.5), Deviation("value", 2.0)],
                  job_ids=[int(w.job_id[2])])
    gains = dict(zip(table["amount"], table["gain"]))
    assert gains[0.5] > 0 > gains[2.0]
    # the reference: the runs by hand, the bidder on the reported values, utility on the true ones
    u = []
    for reported in (values, values * [1, 1, 0.5]):
        records, policy = sm.run_on_engine(w, reported, rule, ZIC(), capacity=1.0, rng=1)
        u.append(values[2] * policy.received[2] - float(records.payment[2]))
    assert gains[0.5] == pytest.approx(u[1] - u[0], rel=1e-12)
