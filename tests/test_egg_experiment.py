"""Helpers of the kang2007 reproduction: examples, value model, misreport rows, estimators."""

import numpy as np
import pytest

from marketsched.experiments import kang2007 as k
from marketsched.experiments.report import Report
from marketsched.workloads import synthetic_workload


@pytest.fixture(scope="module")
def small():
    w = synthetic_workload(n_jobs=300, capacity=72, load=0.5, seed=1)
    return w, k.true_bids(w, 0)[0]


def test_part_examples_reports_the_paper_numbers(tmp_path):
    out = k.part_examples(Report(tmp_path, "t"))
    assert out["example2"] == (2, 13.0, 4.0)


def test_true_bids_follow_the_value_model(small):
    w, bids = small
    assert np.array_equal(bids.arrival, w.submit_time)
    patience = bids.deadlines() - bids.arrival
    assert np.all(patience < k.DELTA) and np.all(patience >= np.minimum(2 * 3600.0, k.DELTA - 1))
    v_at_arrival = bids.values(bids.arrival)
    np.testing.assert_allclose(v_at_arrival, bids.v_start)  # linear and steps start at v0
    assert set(np.unique(bids.min_reliability)) <= {0.0, 0.8, 0.95}


@pytest.mark.parametrize("kind", k.AUDIT_KINDS)
def test_misreport_rows_change_only_the_focal_job(small, kind):
    w, bids = small
    j = 100
    cols, delay = k._variant(bids, j, kind, 0.0)
    w2, b2, order = k._replace_row(bids, w, j, cols, delay)
    assert np.all(np.diff(w2.submit_time) >= 0) and np.array_equal(b2.arrival, w2.submit_time)
    pos = int(np.nonzero(order == j)[0][0])
    others = np.delete(np.arange(len(w)), j)
    keep = np.isin(order, others)
    np.testing.assert_array_equal(b2.v_start[keep], bids.v_start[order[keep]])
    np.testing.assert_array_equal(b2.description[keep], bids.description[order[keep]])
    assert (delay > 0) == kind.startswith("arrival")
    assert b2.arrival[pos] == bids.arrival[j] + delay
    if kind == "deadline_cut":
        assert b2.take([pos]).deadlines()[0] < bids.take([j]).deadlines()[0]
    if kind == "description_up":
        assert b2.description[pos, 0] > bids.description[j, 0] and b2.description[pos, 1] == bids.description[j, 1]


def test_fitted_estimators_are_verified_monotone_and_ordered_by_quantile(small):
    w, _ = small
    models = k.fit_estimators(w)
    x = np.column_stack([w.runtime_estimate, w.user_id.astype(float)])
    est = np.stack([m.estimate(x)[:, 0] for m in models])
    q = np.array([p["quantile"] for p in k.PROVIDERS])
    lo, hi = int(np.argmin(q)), int(np.argmax(q))
    assert np.all(est[hi] >= est[lo])  # a higher quantile never estimates less
