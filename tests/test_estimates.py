"""Run-time estimate models of ``workloads.attributes``: Tsafrir, Etsion & Feitelson (2005)."""

import numpy as np
import pytest
from click.testing import CliRunner

from marketsched.cli import main
from marketsched.scenario import WorkloadSpec
from marketsched.workloads import split_parallel
from marketsched.workloads.attributes import (
    TSAFRIR_HEAD,
    TSAFRIR_JOINT,
    draw,
    parse_model,
    tsafrir_assign,
    tsafrir_bins,
    tsafrir_histogram,
    tsafrir_shares,
)

HOUR = 3600.0


@pytest.fixture(scope="module")
def workload():
    return WorkloadSpec(synthetic_jobs=2000, synthetic_nodes=16).build()


def test_estimates_are_never_below_the_run_time_and_only_take_the_model_values(workload):
    rng = np.random.default_rng([4, 1])
    max_est = float(np.ceil(max(workload.runtime.max(), np.nanmax(workload.runtime_estimate), HOUR) / HOUR) * HOUR)
    values, counts = tsafrir_histogram(len(workload), max_est, rng)
    e = draw("estimates", "tsafrir", workload, 4)
    assert (e >= workload.runtime).all()
    assert set(np.unique(e)) <= set(values.tolist())
    # the histogram drawn is the histogram the model gives (same stream, same draws)
    np.testing.assert_array_equal(np.unique(e, return_counts=True)[1], counts[counts > 0])
    assert e.max() == max_est and np.isin(TSAFRIR_JOINT, values[values < max_est]).all()


def test_estimates_are_deterministic_per_seed(workload):
    a, b = draw("estimates", "tsafrir", workload, 7), draw("estimates", "tsafrir", workload, 7)
    np.testing.assert_array_equal(a, b)
    assert (a != draw("estimates", "tsafrir", workload, 8)).any()


def test_split_copies_share_their_original_estimate():
    w = WorkloadSpec(synthetic_jobs=300, synthetic_nodes=16, parallel=True).build()
    s = split_parallel(w)
    np.testing.assert_array_equal(draw("estimates", "tsafrir", s, 3), draw("estimates", "tsafrir", w, 3)[s.meta["parent"]])


def test_the_histogram_follows_the_model_shares_on_a_large_sample():
    """200,000 jobs: each value's count is its share of the jobs, up to the model's rounding.

    The model fixes the histogram (it matches a histogram to the jobs, it does not draw each
    estimate independently), so the bound is not statistical: each count is rounded, at most
    0.5 off (at this n every share is at least half a job, so raising a count to 1 stays
    within 0.5), and the
    equalisation moves as many jobs as the rounding put in excess, so the L1 distance between
    the counts and ``n x share`` is at most 2 x 0.5 x the number of values."""
    n = 200_000
    values, p = tsafrir_shares(n, 36 * HOUR, np.random.default_rng(11))
    _, counts = tsafrir_histogram(n, 36 * HOUR, np.random.default_rng(11))
    assert np.isclose(p.sum(), 100.0) and 400 < len(values) <= tsafrir_bins(n)  # tail values may coincide
    assert counts.sum() == n and (n * p / 100 >= 0.5).all()
    assert np.abs(counts - n * p / 100).sum() <= len(values)
    # the maximum is the most popular value, with the rest of 89% after ranks 2..20 (21.73%)
    assert counts.argmax() == len(values) - 1 and abs(counts[-1] / n - 0.21733) < len(values) / n
    # the 20 head values hold 89% of the jobs
    head = np.sort(p)[::-1][:20].sum()
    assert head == pytest.approx(89.0)


def test_the_random_rank_map_follows_the_model_probabilities():
    """The random part of the histogram: which popularity rank each head value gets.

    The maximum always has the rank-1 share. Five minutes (time rank 1) draws from the ranks
    the four logs show up to its time rank, less the maximum's: the pool {3, 3, 4, 6}; the
    model takes the more popular of two uniform draws, so rank 3 with probability
    1 - (1/2)^2 = 3/4, rank 4 with (1/2)^2 - (1/4)^2 = 3/16 and rank 6 with 1/16. Over
    N = 2,000 seeds each frequency is within 4 standard deviations, 4 sqrt(p (1 - p) / N)."""
    a, b, c = TSAFRIR_HEAD
    share = {x: a * np.exp(b * x) + c for x in (3, 4, 6)}
    expected = {3: 3 / 4, 4: 3 / 16, 6: 1 / 16}
    n = 2000
    seen = dict.fromkeys(share, 0)
    for seed in range(n):
        values, p = tsafrir_shares(1000, 36 * HOUR, np.random.default_rng([99, seed]))
        assert p[-1] == pytest.approx(89.0 - sum(a * np.exp(b * x) + c for x in range(2, 21)))
        rank = [x for x in share if np.isclose(p[values == 300.0][0], share[x])]
        assert len(rank) == 1
        seen[rank[0]] += 1
    for x, q in expected.items():
        assert abs(seen[x] / n - q) <= 4 * np.sqrt(q * (1 - q) / n), (x, seen)


def test_the_bin_count_model():
    assert [tsafrir_bins(n) for n in (20, 200, 1000, 5000, 10000, 10**6)] == [10, 20, 35, 59, 90, 565]


def test_at_max_sets_the_share_of_the_maximum(workload):
    values, counts = tsafrir_histogram(10000, 36 * HOUR, np.random.default_rng(1), at_max=40.0)
    assert counts[-1] == 4000 and values[-1] == 36 * HOUR


def test_infeasible_assignments_and_bad_parameters_are_named(workload):
    runtime = np.full(10, 2 * HOUR)
    with pytest.raises(ValueError, match="longest jobs"):
        tsafrir_assign(runtime, np.array([HOUR, 3 * HOUR]), np.array([5, 5]), np.random.default_rng(0))
    with pytest.raises(ValueError, match="run longer than max=1 h"):
        draw("estimates", "tsafrir:max=1", workload, 1)
    for bad, msg in (("tsafrir:max=0.5", "max must be at least 1 hour"), ("tsafrir:head=120", "head must be"),
                     ("tsafrir:at_max=95", "at_max must be"), ("tsafrir:head=50", "raise head")):
        with pytest.raises(ValueError, match=msg):
            draw("estimates", bad, workload, 1)
    with pytest.raises(ValueError, match="bad parameter 'f=2'"):
        parse_model("estimates", "tsafrir:f=2")


def test_simulate_with_tsafrir_estimates_on_the_builtin_workload():
    r = CliRunner().invoke(main, ["simulate", "--synthetic-jobs", "300", "--synthetic-nodes", "8",
                                  "--mechanism", "easy", "--estimates", "tsafrir"])
    assert r.exit_code == 0, r.output
    assert "model 'tsafrir'" in r.output and "300/300" in r.output


def test_simulate_with_tsafrir_estimates_on_a_trace(trace_path):
    path = trace_path("KTH-SP2-1996-2.1-cln")
    r = CliRunner().invoke(main, ["simulate", "--trace", str(path), "--jobs", "3000", "--mechanism", "easy",
                                  "--estimates", "tsafrir"])
    assert r.exit_code == 0, r.output
    assert "3,000/3,000" in r.output
