"""The verdict rule (marketsched.analysis.verdicts) against a plain reading of its definition."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from marketsched.analysis import verdicts as V

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
# few distinct values, so ends and figures often coincide (ties at the region's ends)
tied = st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.5, 0.95, 1.0, 1.05, 2.0])


def reference_verdict(lo_r, hi_r, lo_open, hi_open, contain, lo, hi):
    """Rule v1 as written in the module docstring, with sets spelled out."""

    def inside(x, a, b):
        left = x > a if lo_open else x >= a
        right = x < b if hi_open else x <= b
        return left and right

    def overlap(a, b):  # [lo, hi] meets the region with ends a, b
        # some x in [lo, hi] inside (a, b): the interval's right end past a, its left end before b
        return (hi > a if lo_open else hi >= a) and (lo < b if hi_open else lo <= b)

    if contain:
        ok = inside(lo, lo_r, hi_r) and inside(hi, lo_r, hi_r)
    else:
        ok = overlap(lo_r, hi_r)
    if ok:
        return "match"
    a = lo_r - 0.05 * abs(lo_r) if math.isfinite(lo_r) else lo_r
    b = hi_r + 0.05 * abs(hi_r) if math.isfinite(hi_r) else hi_r
    return "near" if overlap(a, b) else "differs"


def reference_verdict_v2(lo_r, hi_r, lo_open, hi_open, contain, lo, est, hi):
    """Rule v2 as written in the module docstring, with sets spelled out."""

    def within(x, a, b):  # x in the set with ends a, b (the region's open ends)
        return (x > a if lo_open else x >= a) and (x < b if hi_open else x <= b)

    def meets(a, b):  # [lo, hi] meets the set with ends a, b
        return (hi > a if lo_open else hi >= a) and (lo < b if hi_open else lo <= b)

    a = lo_r - 0.05 * abs(lo_r) if math.isfinite(lo_r) else lo_r  # the near band
    b = hi_r + 0.05 * abs(hi_r) if math.isfinite(hi_r) else hi_r
    too_wide = hi - lo > b - a
    established = within(lo, lo_r, hi_r) and within(hi, lo_r, hi_r) if contain else meets(lo_r, hi_r)
    if established and not too_wide:
        return "match"
    if not too_wide and within(est, a, b):
        return "near"
    return "inconclusive" if meets(lo_r, hi_r) else "differs"


@st.composite
def regions(draw):
    a, b = sorted((draw(tied | finite), draw(tied | finite)))
    if draw(st.booleans()):
        a = -math.inf
    elif draw(st.booleans()):
        b = math.inf
    lo_open, hi_open = (draw(st.booleans()), draw(st.booleans())) if a < b else (False, False)
    return V.Region(a, b, draw(st.booleans()), lo_open, hi_open)


@st.composite
def intervals(draw):
    lo, hi = sorted((draw(tied | finite), draw(tied | finite)))
    est = draw(st.floats(lo, hi)) if lo < hi else lo
    return V.Interval(est, lo, hi, draw(st.integers(1, 50)), draw(st.sampled_from(["t", "exact", "bootstrap"])))


@settings(max_examples=600, deadline=None)
@given(regions(), intervals())
def test_rule_v1_equals_its_plain_definition(r, iv):
    assert V.judge(r, iv, rule="v1") == reference_verdict(r.lo, r.hi, r.lo_open, r.hi_open, r.contain, iv.lo, iv.hi)


@settings(max_examples=600, deadline=None)
@given(regions(), intervals())
def test_rule_v2_equals_its_plain_definition(r, iv):
    want = reference_verdict_v2(r.lo, r.hi, r.lo_open, r.hi_open, r.contain, iv.lo, iv.estimate, iv.hi)
    assert V.judge(r, iv, rule="v2") == want
    both = V.judge(r, iv)  # the default: v2's verdict carrying v1's
    assert both == want and both.v1 == V.judge(r, iv, rule="v1")


@settings(max_examples=600, deadline=None)
@given(regions(), intervals())
def test_rule_v2_is_never_more_lenient_than_v1(r, iv):
    v1, v2 = V.judge(r, iv, rule="v1"), V.judge(r, iv, rule="v2")
    if v2 == "match":
        assert v1 == "match"
    if v2 == "near":
        assert v1 in ("match", "near")
    if v2 in ("match", "near"):  # never on an interval wider than the claim's near band
        band = r.widened()
        assert iv.hi - iv.lo <= band.hi - band.lo


@settings(max_examples=300, deadline=None)
@given(regions(), intervals(), st.floats(0, 10))
def test_wider_interval_helps_a_printed_number_and_never_a_property_under_v1(r, iv, extra):
    wide = V.Interval(iv.estimate, iv.lo - extra, iv.hi + extra, iv.n, iv.method)
    if r.contain:  # a property claim is matched only when established: more uncertainty cannot help
        if V.judge(r, wide, rule="v1") == "match":
            assert V.judge(r, iv, rule="v1") == "match"
    else:  # a printed number is matched when compatible: more uncertainty cannot hurt
        if V.judge(r, iv, rule="v1") == "match":
            assert V.judge(r, wide, rule="v1") == "match"


@settings(max_examples=300, deadline=None)
@given(regions(), intervals(), st.floats(0, 10))
def test_under_v2_more_uncertainty_never_turns_a_verdict_into_match_or_near(r, iv, extra):
    wide = V.Interval(iv.estimate, iv.lo - extra, iv.hi + extra, iv.n, iv.method)
    if V.judge(r, wide, rule="v2") == "near":
        assert V.judge(r, iv, rule="v2") in ("match", "near")
    if r.contain and V.judge(r, wide, rule="v2") == "match":
        assert V.judge(r, iv, rule="v2") == "match"


@settings(max_examples=300, deadline=None)
@given(regions(), intervals(), st.sampled_from(V.RULES))
def test_mirror_symmetry(r, iv, rule):
    mr = V.Region(-r.hi, -r.lo, r.contain, r.hi_open, r.lo_open)
    miv = V.Interval(-iv.estimate, -iv.hi, -iv.lo, iv.n, iv.method)
    assert V.judge(mr, miv, rule=rule) == V.judge(r, iv, rule=rule)


# ---- rule v2's hand table: each leniency of rule v1 as a case v1 passes and v2 does not
def _both(region, iv, **kw):
    v = V.judge(region, iv, **kw)
    return v.v1, str(v)


def test_v2_a_wide_interval_is_inconclusive_never_a_match():
    # Mutz (2008) Fig 5.8 "slope 2": 1.91 [0.62, 3.20] covers O(n) to O(n^3)
    assert _both(V.verbal("about", 2.0), V.Interval(1.91, 0.62, 3.20, 9, "fit")) == ("match", "inconclusive")
    # Fig 6.2 "slope 4": [2.54, 4.60]; Fig 7.11 "~30%": 0.35 [0.22, 0.50]
    assert _both(V.verbal("about", 4.0), V.Interval(3.57, 2.54, 4.60, 9, "fit")) == ("match", "inconclusive")
    assert _both(V.verbal("about", 0.30), V.Interval(0.35, 0.22, 0.50, 30, "t")) == ("match", "inconclusive")
    # a printed number: 1.07 against a mean +- a band wider than 1.07's near band [1.012, 1.129]
    assert _both(V.value("1.07"), V.Interval(1.10, 0.95, 1.25, 5, "t")) == ("match", "inconclusive")
    # as narrow as the band: still a match; wide and away from the claim: differs under both
    assert _both(V.value("1.07"), V.Interval(1.10, 1.06, 1.14, 5, "t")) == ("match", "match")
    assert _both(V.verbal("about", 2.0), V.Interval(5.0, 4.0, 6.0, 9, "fit")) == ("differs", "differs")


def test_v2_near_needs_the_estimate_on_the_claims_side():
    # Shudler et al. (2010), row 110: -537.9 [-1344, 268.5] against "A above B" (an end at 0)
    assert _both(V.ordering(">"), V.Interval(-537.9, -1344.0, 268.5, 10, "t")) == ("near", "inconclusive")
    assert _both(V.ordering(">"), V.Interval(537.9, -268.5, 1344.0, 10, "t")) == ("near", "near")
    # a floor: the estimate below the near band, the interval reaching the floor
    assert _both(V.bound(">=", "0.90"), V.Interval(0.80, 0.70, 0.91, 10, "t")) == ("near", "inconclusive")
    # a printed number: the interval overlaps the band but the estimate lies outside it and the value outside I
    assert _both(V.value("1.07"), V.Interval(1.14, 1.125, 1.155, 5, "t")) == ("near", "differs")


BETAS = V.Scale((0.05, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9), ("truthful",) + ("untruthful",) * 6)


def test_v2_categories_have_the_distance_of_their_meaning():
    # Shudler et al. (2010) sec. V: (NPHB, 25%) in the paper, (NPHB, 5%) ours: 5% is the truthful level
    assert (V.category_verdict(0.25, 0.05, BETAS.levels, rule="v1"), V.category_verdict(0.25, 0.05, BETAS)) == \
        ("near", "differs")
    v = V.category_verdict(0.25, 0.05, BETAS)
    assert (v.v1, v) == ("near", "differs")
    assert V.category_verdict(0.7, 0.8, BETAS) == "near"      # two untruthful levels one step apart
    assert V.category_verdict(0.7, 0.9, BETAS) == "differs"
    # no significance mark is never near a mark
    v = V.category_verdict("*", "", V.STARS_SCALE)
    assert (v.v1, v) == ("near", "differs")
    assert V.category_verdict("***", "**", V.STARS_SCALE) == "near"
    with pytest.raises(TypeError, match="needs a Scale"):
        V.category_verdict(0.7, 0.8, BETAS.levels)  # rule v2: a bare grid states no distance
    with pytest.raises(ValueError, match="2 classes for 3 levels"):
        V.Scale((1, 2, 3), ("a", "b"))


def test_v2_bounds_for_all_instances_are_not_refuted_not_matched():
    # Stößer (2009) ch. 5 Theorem 2: "3.281-competitive", the largest ratio over 300 random instances
    theorem = V.bound("<=", "3.281")
    assert _both(theorem, V.exact(2.41), instances=300) == ("match", "not refuted")
    assert _both(theorem, V.exact(3.5), instances=300) == ("differs", "differs")  # a counterexample refutes
    # Kang & Parkes (2007) Theorem 1: no profitable misreport, the share of profitable ones in random cases
    none = V.value(0.0, exact=True)
    assert _both(none, V.wilson_interval(0, 1200), instances=1200) == ("match", "not refuted")
    assert _both(none, V.wilson_interval(2, 1200), instances=1200) == ("differs", "differs")
    c = V.Claims()
    c.check("Thm 2", "competitive ratio", "<= 3.281", theorem, V.exact(2.41), instances=300)
    assert c.rows[0].ours == "2.41 (300 instances)"
    assert c.counts()["not refuted"] == 1 and c.counts()["match"] == 0 and c.counts("v1")["match"] == 1


def test_v2_settings_are_not_counted():
    # Shudler et al. (2010) Table I "105 nodes": an input of the runs
    inputs = V.Claims("Table I", settings=True)
    inputs.check("Table I, LPC", "number of nodes", "105", V.value("105"), V.exact(105), fmt=",.0f")
    assert inputs.counted("v1") and not inputs.counted("v2")
    assert inputs.rows[0].verdict == inputs.rows[0].verdict_v1 == "match"
    assert not V.Claims(ours=True).counted("v1")


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=2, max_size=30), st.floats(-100, 100), st.floats(0.1, 10))
def test_t_interval_is_location_scale_equivariant_and_matches_scipy(x, shift, scale):
    a = V.t_interval(x)
    b = V.t_interval([scale * v + shift for v in x])
    assert b.estimate == pytest.approx(scale * a.estimate + shift, rel=1e-9, abs=1e-6)
    assert b.lo == pytest.approx(scale * a.lo + shift, rel=1e-9, abs=1e-6)
    assert b.hi == pytest.approx(scale * a.hi + shift, rel=1e-9, abs=1e-6)
    arr = np.asarray(x)
    if arr.std(ddof=1) > 0:
        lo, hi = stats.t.interval(0.95, len(arr) - 1, loc=arr.mean(), scale=stats.sem(arr))
        assert a.lo == pytest.approx(lo, rel=1e-9, abs=1e-6) and a.hi == pytest.approx(hi, rel=1e-9, abs=1e-6)


def test_one_run_has_no_interval_and_shows_it():
    iv = V.t_interval([0.9])
    assert (iv.lo, iv.hi, iv.n) == (0.9, 0.9, 1)
    assert iv.text() == "0.9 (1 run)"
    assert V.exact(0.9).text() == "0.9"
    assert V.t_interval([1.0, 2.0, 3.0]).text(".2f") == "2.00 [-0.48, 4.48]"


def test_printed_precision():
    assert V.printed_half_unit("0.967") == pytest.approx(0.0005)
    assert V.printed_half_unit("1.07") == pytest.approx(0.005)
    assert V.printed_half_unit("219,704") == 0.5
    assert V.printed_half_unit("50%") == 0.5
    assert V.printed_half_unit("-1.5e-3") == pytest.approx(0.5e-4)
    assert V.printed_value("219,704") == 219704
    with pytest.raises(ValueError, match="not a printed number"):
        V.printed_half_unit("about 3")


def test_printed_number_examples():
    lpc = V.Interval(1.084, 1.072, 1.096, 4, "t")
    assert V.judge(V.value("1.07"), lpc) == "match"          # 1.07 lies in [1.072 - 0.005, ...]
    assert V.judge(V.value("1.07"), V.Interval(1.09, 1.08, 1.1, 4, "t")) == "near"
    assert V.judge(V.value("1.07"), V.Interval(1.2, 1.19, 1.21, 4, "t")) == "differs"
    assert V.judge(V.value("2.1716"), V.exact(2.1715)) == "near"   # off by one in the last digit
    assert V.judge(V.value("2.1716"), V.exact(2.17163)) == "match"  # within its printed precision


def test_bounds_and_orderings_need_the_whole_interval():
    floor = V.bound(">=", "0.90")
    assert V.judge(floor, V.Interval(0.91, 0.896, 0.93, 5, "t")) == "match"
    assert V.judge(floor, V.Interval(0.90, 0.89, 0.91, 5, "t")) == "near"   # straddles: not established
    assert V.judge(floor, V.Interval(0.88, 0.875, 0.885, 5, "t")) == "near"  # 2% short: within 5%
    assert V.judge(floor, V.Interval(0.80, 0.79, 0.81, 5, "t")) == "differs"
    above = V.ordering(">")
    assert V.judge(above, V.Interval(1.0, 0.1, 2.0, 5, "t")) == "match"
    assert V.judge(above, V.Interval(1.0, -0.1, 2.0, 5, "t")) == "near"
    assert V.judge(above, V.Interval(-1.0, -2.0, -0.1, 5, "t")) == "differs"
    assert V.judge(above, V.Interval(0.0, 0.0, 0.0, 5, "t")) == "differs"  # identical: not above at all


def test_verbal_table():
    about50 = V.verbal("about", 50)
    assert (about50.lo, about50.hi) == (47.5, 52.5)
    assert V.judge(about50, V.Interval(43.4, 42.0, 44.8, 5, "t")) == "differs"
    assert V.judge(about50, V.Interval(46.0, 45.0, 47.0, 5, "t")) == "near"
    same = V.verbal("almost the same")
    assert V.judge(same, V.Interval(0.01, -0.02, 0.04, 5, "t")) == "match"
    assert V.judge(same, V.Interval(0.04, 0.02, 0.06, 5, "t")) == "near"
    slightly = V.verbal("slightly higher")
    assert V.judge(slightly, V.Interval(0.05, 0.01, 0.09, 5, "t")) == "match"
    assert V.judge(slightly, V.Interval(0.05, -0.01, 0.09, 5, "t")) == "near"
    assert V.judge(slightly, V.Interval(0.5, 0.4, 0.6, 5, "t")) == "differs"
    with pytest.raises(ValueError, match="unknown phrase"):
        V.verbal("roughly")
    with pytest.raises(ValueError, match="needs the stated figure"):
        V.verbal("about")


def test_categories_and_worst():
    grid = (0.05, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9)
    assert V.category_verdict(0.7, 0.7, grid, rule="v1") == "match"
    assert V.category_verdict(0.7, 0.8, grid, rule="v1") == "near"
    assert V.category_verdict(0.7, 0.9, grid, rule="v1") == "differs"
    assert V.category_verdict("***", "**", V.STARS, rule="v1") == "near"
    assert V.category_verdict("***", "", V.STARS, rule="v1") == "differs"
    assert V.category_verdict("(HB, 50%)", "(WSPT, 80%)") == "differs"
    assert V.category_verdict("x", None) == "not attempted"
    assert V.worst(["match", "near", "match"]) == "near"
    assert V.worst(["match", "not attempted"]) == "not attempted"
    assert V.worst(["near", "differs", "not attempted"]) == "differs"
    assert V.worst(["near", "inconclusive", "match"]) == "inconclusive"
    assert V.worst(["match", "not refuted"]) == "not refuted"
    w = V.worst([V.Verdict("inconclusive", "match"), V.Verdict("near", "near")])
    assert (w, w.v1) == ("inconclusive", "near")
    assert V.stars(0.005) == "***" and V.stars(0.03) == "**" and V.stars(0.07) == "*" and V.stars(0.2) == ""


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(V.VERDICTS), min_size=1, max_size=6))
def test_worst_is_order_free_and_idempotent(vs):
    assert V.worst(vs) == V.worst(list(reversed(vs))) == V.worst(vs + [V.worst(vs)])
    assert V.worst(vs) in vs


def test_bootstrap_is_deterministic_and_brackets_the_statistic():
    rng = np.random.default_rng(1)
    a, b = rng.normal(10, 1, 60), rng.normal(8, 1, 60)
    ratio = lambda x, y: x.mean() / y.mean()  # noqa: E731
    one, two = V.bootstrap_interval(ratio, a, b), V.bootstrap_interval(ratio, a, b)
    assert one == two
    assert one.lo < ratio(a, b) < one.hi
    assert one.lo > 1.1 and one.hi < 1.4


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 500), st.data())
def test_wilson_interval_brackets_the_share(n, data):
    k = data.draw(st.integers(0, n))
    iv = V.wilson_interval(k, n)
    assert 0 <= iv.lo <= k / n <= iv.hi <= 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-100, 100), min_size=2, max_size=20), st.floats(-10, 10))
def test_paired_interval_is_the_interval_of_differences(a, shift):
    b = [x - shift for x in a]
    iv = V.paired_interval(a, b)
    assert iv.estimate == pytest.approx(shift, abs=1e-6)
    assume(iv.hi - iv.lo < 1e-6)
    assert iv.lo == pytest.approx(shift, abs=1e-5)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="pairs need equal lengths"):
        V.paired_interval([1, 2], [1])
    with pytest.raises(ValueError, match="no samples"):
        V.t_interval([])
    with pytest.raises(ValueError, match="unknown operator"):
        V.bound("=>", "1")
    with pytest.raises(ValueError, match="unknown verdict"):
        V.Claim("Table 1", "x", "1", "1", "maybe")
    with pytest.raises(ValueError, match="no verdict of rule v1"):
        V.Claim("Table 1", "x", "1", "1", "match", verdict_v1="inconclusive")
    with pytest.raises(ValueError, match="unknown rule"):
        V.judge(V.ordering(">"), V.exact(1.0), rule="v3")


def test_claims_count_and_keep_ours_apart():
    c = V.Claims()
    c.check("Sec. 1", "efficiency >= 0.90", ">= 0.90", V.bound(">=", "0.90"), V.Interval(0.88, 0.87, 0.89, 5, "t"))
    c.check("Sec. 5", "about 0.9", "~0.9", V.verbal("about", 0.9), V.Interval(0.9, 0.89, 0.91, 5, "t"))
    c.not_attempted("Fig. 2", "no data", "-", "the paper prints no figure")
    assert c.counts() == {"match": 1, "near": 1, "differs": 0, "inconclusive": 0, "not refuted": 0,
                          "not attempted": 1}
    assert c.counts("v1") == {"match": 1, "near": 1, "differs": 0, "not attempted": 1}
    assert V.counts_text(c.counts()) == "3 claims: 1 match, 1 near, 0 differ, 0 inconclusive, 0 not refuted, " \
                                        "1 not attempted"
    assert V.counts_text(c.counts("v1")) == "3 claims: 1 match, 1 near, 0 differ, 1 not attempted"
    assert list(c.frame().columns) == ["where", "claim", "paper", "ours", "verdict", "note", "verdict_v1"]


def test_exact_figures_have_no_rounding():
    assert V.judge(V.value(0.75, exact=True), V.exact(0.7500001)) == "near"
    assert V.judge(V.value("0.75"), V.exact(0.7500001)) == "match"
    assert V.judge(V.bound(">=", 1.0, exact=True), V.exact(0.9999)) == "near"
    with pytest.raises(ValueError, match="as printed"):
        V.value(0.75)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-100, 100), min_size=2, max_size=20), st.lists(st.floats(-100, 100), min_size=2, max_size=20))
def test_welch_interval_matches_scipy(a, b):
    iv = V.welch_interval(a, b)
    assert iv.estimate == pytest.approx(np.mean(a) - np.mean(b), abs=1e-9)
    assume(np.var(a) > 1e-6 and np.var(b) > 1e-6)
    res = stats.ttest_ind(a, b, equal_var=False)
    lo, hi = res.confidence_interval(0.95)
    assert iv.lo == pytest.approx(lo, rel=1e-6, abs=1e-6) and iv.hi == pytest.approx(hi, rel=1e-6, abs=1e-6)


def test_wilson_interval_matches_the_formula():
    for k, n in [(0, 10), (3, 10), (10, 10), (7, 40)]:
        z = 1.959963984540054
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        iv = V.wilson_interval(k, n)
        assert (iv.lo, iv.hi) == pytest.approx((centre - half, centre + half), abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 1e4), st.floats(1e-3, 1e4)), min_size=3, max_size=12))
def test_loglog_slope_is_the_least_squares_fit_of_the_logs(points):
    """The plain definition: the slope of np.polyfit on the logs, inside its own t-interval."""
    x, y = (np.array(v) for v in zip(*points))
    assume(np.ptp(np.log(x)) > 1e-6)
    iv = V.loglog_slope(x, y)
    assert iv is not None and iv.n == len(x)
    assert iv.estimate == pytest.approx(np.polyfit(np.log(x), np.log(y), 1)[0], rel=1e-6, abs=1e-9)
    assert iv.lo <= iv.estimate <= iv.hi


def test_loglog_slope_of_an_exact_power_law_and_of_too_few_points():
    x = np.array([20.0, 40, 80, 160])
    iv = V.loglog_slope(x, 3.0 * x ** 2.5)
    assert iv is not None and iv.estimate == pytest.approx(2.5) and iv.hi - iv.lo == pytest.approx(0, abs=1e-9)
    two = V.loglog_slope([10, 100], [1, 1000])
    assert two is not None and (two.lo, two.estimate, two.hi) == pytest.approx((3, 3, 3))  # a point: no interval
    assert V.loglog_slope([10], [1]) is None and V.loglog_slope([5, 5, 5], [1, 2, 3]) is None
    assert V.loglog_slope([0, -1, 10], [1, 1, 1]) is None  # non-positive sizes are left out
