"""Metrics of Shudler et al. 2010 (Eqs. 1-3) and the grouping helpers."""

import numpy as np

from marketsched.analysis.metrics import grouped, job_table, runtime_group, summarize, value_band
from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.priority import make_priority_mechanism
from marketsched.workloads.workload import Workload


def hand_run():
    # one node; HB k-th price; see tests/test_priority_mechanisms.py::test_hb_by_hand
    w = Workload.from_columns(submit_time=[0, 2, 4], runtime=[10, 3, 1], capacity=1)
    bid = np.array([2.0, 5.0, 3.0])
    rec = Simulator(w, make_priority_mechanism("hb", w, bid, "kth")).run()
    return w, rec, bid


def test_job_table_by_hand():
    w, rec, bid = hand_run()
    value = np.array([4.0, 5.0, 100.0])  # true values differ from the bids
    t = job_table(w, rec, true_value=value, bid=bid)
    assert t["flow_time"].tolist() == [14, 3, 2]
    assert t["wait_time"].tolist() == [0, 0, 1]
    # BSD = flow / max(runtime, 60): all run times are below 60 s
    np.testing.assert_allclose(t["bounded_slowdown"], [14 / 60, 3 / 60, 2 / 60])
    # utility = -w * flow - payment, payments 10, 7, 2
    assert t["utility"].tolist() == [-4 * 14 - 10, -5 * 3 - 7, -100 * 2 - 2]
    assert t["value_band"].tolist() == ["low", "low", "middle"]


def test_summary_by_hand():
    w, rec, bid = hand_run()
    s = summarize(w, rec, true_value=bid)
    assert s["completed"] == 3 and s["jobs"] == 3
    assert s["revenue"] == 19
    assert s["twft"] == 2 * 14 + 5 * 3 + 3 * 2
    assert s["utilization"] == 14 / 14  # 14 s of work on 1 node over 14 s
    assert s["preemptions"] == 1


def test_value_bands_and_runtime_thirds():
    assert value_band([0, 60, 60.5, 119.9, 120, 500]).tolist() == ["low", "low", "middle", "middle", "high", "high"]
    g = runtime_group([5, 1, 1, 1, 9, 7])
    assert g.tolist() == ["B", "A", "A", "B", "C", "C"]  # ties split by job order into equal thirds
    assert sorted(runtime_group(np.arange(100)).tolist()).count("C") == 33


def test_grouped_counts_ssj():
    w, rec, bid = hand_run()
    t = job_table(w, rec, true_value=bid, bid=bid)
    g = grouped(t, by=("value_band",))
    assert g.loc["low", "jobs"] == 3
    assert g.loc["low", "ssj_share"] == 0.0
