import numpy as np
import pytest
from scipy import stats

from marketsched.workloads.transforms import split_parallel
from marketsched.workloads.values import bimodal, per_job, uniform_int
from marketsched.workloads.workload import Workload

N = 100_000


def split_components(v):
    high = v > 90  # the two components overlap with probability ~3e-5 at 90
    return v[~high], v[high]


def test_bimodal_resample_is_truncated_mix():
    v = bimodal(np.random.default_rng(1), N)
    assert v.shape == (N,) and v.dtype == np.float64
    assert v.min() >= 0
    low, high = split_components(v)
    assert abs(len(high) / N - 0.2) < 4 * np.sqrt(0.16 / N)
    # low component is N(30, 15) truncated at 0; high is N(150, 15) (truncation negligible)
    tn = stats.truncnorm(a=(0 - 30) / 15, b=np.inf, loc=30, scale=15)
    assert abs(low.mean() - tn.mean()) < 4 * tn.std() / np.sqrt(len(low))
    assert abs(low.std() - tn.std()) < 0.2
    assert abs(high.mean() - 150) < 4 * 15 / np.sqrt(len(high)) and abs(high.std() - 15) < 0.3
    # a Kolmogorov-Smirnov check of the low component against the truncated normal
    assert stats.kstest(low, tn.cdf).pvalue > 1e-4
    # share above 180 is kept (~0.2 * P(Z > 2) = 0.46%)
    assert abs((v > 180).mean() - 0.2 * stats.norm.sf(2)) < 0.0015


def test_bimodal_clip_and_keep():
    clip = bimodal(np.random.default_rng(2), N, negative="clip")
    expected_zero = 0.8 * stats.norm.cdf(-2)  # about 1.82%
    assert clip.min() == 0 and abs((clip == 0).mean() - expected_zero) < 4 * np.sqrt(expected_zero / N)
    low, _ = split_components(clip)
    assert abs(low.mean() - (30 * stats.norm.cdf(2) + 15 * stats.norm.pdf(2))) < 0.25  # E[max(X, 0)]
    keep = bimodal(np.random.default_rng(2), N, negative="keep")
    assert abs((keep < 0).mean() - expected_zero) < 4 * np.sqrt(expected_zero / N)
    np.testing.assert_array_equal(np.maximum(keep, 0), clip)  # same draws, different policy


def test_bimodal_parameters_and_errors():
    v = bimodal(np.random.default_rng(3), N, low=(10, 1), high=(20, 1), p_high=0.5)
    assert abs((v > 15).mean() - 0.5) < 0.01
    assert (bimodal(0, 10, p_high=0.0) < 100).all() and (bimodal(0, 10, p_high=1.0) > 60).all()
    assert bimodal(0, 0).shape == (0,)
    with pytest.raises(ValueError, match="p_high"):
        bimodal(0, 10, p_high=1.5)
    with pytest.raises(ValueError, match="negative must be one of"):
        bimodal(0, 10, negative="drop")
    with pytest.raises(ValueError, match="sd >= 0"):
        bimodal(0, 10, low=(30, -1))
    with pytest.raises(ValueError, match="n must be"):
        bimodal(0, -5)
    with pytest.raises(ValueError, match="can never draw"):
        bimodal(0, 10, low=(-5, 0))
    with pytest.raises(ValueError, match="Generator or an int seed"):
        bimodal("seed", 10)


def test_determinism():
    a = bimodal(np.random.default_rng(42), 1000)
    b = bimodal(np.random.default_rng(42), 1000)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, bimodal(42, 1000))
    assert not np.array_equal(a, bimodal(43, 1000))
    np.testing.assert_array_equal(uniform_int(5, 100), uniform_int(np.random.default_rng(5), 100))


def test_uniform_int():
    v = uniform_int(np.random.default_rng(4), N)
    assert v.dtype == np.float64 and v.min() == 1 and v.max() == 100
    assert set(np.unique(v)) == set(range(1, 101))
    assert abs(v.mean() - 50.5) < 4 * np.sqrt((100**2 - 1) / 12 / N)
    assert set(uniform_int(0, 50, 3, 3)) == {3}
    with pytest.raises(ValueError, match="low <= high"):
        uniform_int(0, 10, 5, 4)


def test_per_job_common_values_for_copies():
    w = Workload.from_columns(submit_time=[0, 1, 2], runtime=[1, 1, 1], procs=[3, 1, 2], capacity=4)
    s = split_parallel(w)
    v = per_job(s, "uniform", rng=9)
    np.testing.assert_array_equal(v, np.repeat(uniform_int(9, 3), [3, 1, 2]))
    assert len(set(v[:3])) == 1 and len(set(v[4:])) == 1
    np.testing.assert_array_equal(per_job(w, "bimodal", rng=1), bimodal(1, 3))
    np.testing.assert_array_equal(per_job(w, lambda rng, n: np.arange(n, dtype=float)), [0, 1, 2])
    with pytest.raises(ValueError, match="unknown value model"):
        per_job(w, "pareto")


def test_bimodal_from_one_redraws_below_one_from_the_same_component():
    from marketsched.workloads.values import MODELS, bimodal, bimodal_from_one

    v = bimodal_from_one(np.random.default_rng(3), 200_000)
    assert v.min() >= 1 and MODELS["bimodal-1"] is bimodal_from_one
    low = bimodal(np.random.default_rng(3), 200_000)
    assert (low < 1).sum() > 100  # the papers' mix (resampled below 0) has values in [0, 1)
    # the 80/20 mix is kept: the share above 90 (the high component) is about 20 %
    assert abs((v > 90).mean() - 0.2) < 0.01
    with pytest.raises(ValueError, match=">= 1"):
        bimodal(np.random.default_rng(0), 5, low=(0.5, 0.0), floor=1.0)
