"""Order book validation and the table 3.6 generator (Stößer 2009, section 3.5.1)."""

import numpy as np
import pytest

from marketsched.mechanisms.clearing.orderbook import OrderBook, generate_order_book

JOBS = [(10, 35, 50, 3, 7), (14, 35, 27, 1, 7)]
NODES = [(8, 123, 98, 1, 8)]


def cols():
    j, n = np.array(JOBS, float), np.array(NODES, float)
    return dict(job_value=j[:, 0], job_cpu=j[:, 1], job_mem=j[:, 2], job_release=j[:, 3], job_end=j[:, 4],
                node_reserve=n[:, 0], node_cpu=n[:, 1], node_mem=n[:, 2], node_start=n[:, 3], node_end=n[:, 4])


def test_rows_and_derived_fields():
    b = OrderBook.from_rows(JOBS, NODES)
    assert b.n_jobs == 2 and b.n_nodes == 1
    assert b.job_duration.tolist() == [5, 7]
    assert b.horizon == 9
    assert b.job_release.dtype == np.int64


@pytest.mark.parametrize("field,index,value,match", [
    ("job_value", 1, np.nan, r"'job_value' is not finite .* job 1"),
    ("job_value", 0, -1.0, r"'job_value' must be >= 0: job 0"),
    ("job_cpu", 1, 0.0, r"'job_cpu' must be >= 1.*job 1"),
    ("job_mem", 0, -5.0, r"'job_mem' must be >= 0: job 0"),
    ("job_release", 1, 1.5, r"'job_release' must be an integer timeslot: job 1"),
    ("job_end", 0, 2.0, r"'job_end' is before job_release .*job 0"),
    ("node_cpu", 0, -1.0, r"'node_cpu' must be >= 0: node 0"),
    ("node_reserve", 0, np.inf, r"'node_reserve' is not finite .* node 0"),
    ("node_end", 0, 0.0, r"'node_end' is before node_start.*node 0"),
    ("node_start", 0, -1.0, r"'node_start' must be >= 0"),
])
def test_bad_values_name_field_and_order(field, index, value, match):
    c = cols()
    c[field] = c[field].copy()
    c[field][index] = value
    with pytest.raises(ValueError, match=match):
        OrderBook.from_arrays(**c)


def test_bad_shapes():
    c = cols()
    c["job_mem"] = c["job_mem"][:1]
    with pytest.raises(ValueError, match=r"'job_mem' has 1 entries, expected 2"):
        OrderBook.from_arrays(**c)
    c = cols()
    c["node_cpu"] = np.ones((1, 1))
    with pytest.raises(ValueError, match=r"'node_cpu' must be one-dimensional"):
        OrderBook.from_arrays(**c)
    c = cols()
    c["job_value"] = ["a", "b"]
    with pytest.raises(ValueError, match=r"'job_value' is not numeric"):
        OrderBook.from_arrays(**c)


def test_misreport_copies():
    b = OrderBook.from_rows(JOBS, NODES)
    b2 = b.with_job_value(0, 5.0)
    assert b2.job_value[0] == 5.0 and b.job_value[0] == 10.0
    with pytest.raises(ValueError, match="job 1"):
        b.with_job_value(1, -2.0)
    with pytest.raises(ValueError, match="node 0"):
        b.with_node_reserve(0, np.nan)


def test_generator_table_3_6_statistics():
    b = generate_order_book(4000, 4000, np.random.default_rng(7))
    assert b.job_cpu.min() >= 1 and b.job_cpu.max() <= 6
    assert abs(b.job_cpu.mean() - 3.5) < 0.1
    assert abs(b.node_cpu.mean() - 6.0) < 0.1
    # sigma reading of the lognormal: mean 55.216, variance 69.375 (section 3.5.1)
    assert abs(b.job_mem.mean() - 55.216) < 0.6
    assert abs(b.job_mem.var() - 69.375) < 6.0
    assert abs(b.node_mem.mean() - np.exp(5 + 0.02)) < 2.0
    assert set(np.unique(b.job_value)) <= set(range(10, 21)) and len(np.unique(b.job_value)) == 11
    assert set(np.unique(b.node_reserve)) == set(range(7, 13))
    assert b.job_release.max() <= 5 and b.node_start.max() <= 4
    assert abs(b.job_duration.mean() - 3.5) < 0.1
    assert abs((b.node_end - b.node_start + 1).mean() - 5.0) < 0.1


def test_generator_duration_sweep_and_determinism():
    b = generate_order_book(3000, 3000, np.random.default_rng(1), job_duration_trials=8, node_availability_trials=11)
    assert abs(b.job_duration.mean() - 5.0) < 0.1
    a1 = generate_order_book(30, 60, np.random.default_rng(3))
    a2 = generate_order_book(30, 60, np.random.default_rng(3))
    for f in ("job_value", "job_mem", "job_end", "node_reserve", "node_mem", "node_end"):
        assert np.array_equal(getattr(a1, f), getattr(a2, f))
    with pytest.raises(ValueError, match="n_nodes"):
        generate_order_book(-1, 3, np.random.default_rng(0))


def test_memory_read_as_a_log_space_variance():
    b = generate_order_book(4000, 4000, np.random.default_rng(7), memory="variance")
    # log-space sigma sqrt(0.15), sqrt(0.2): mean exp(4 + 0.15 / 2), the other columns unchanged
    assert abs(np.log(b.job_mem).std() - np.sqrt(0.15)) < 0.02
    assert abs(np.log(b.node_mem).std() - np.sqrt(0.2)) < 0.02
    assert abs(b.job_mem.mean() - np.exp(4 + 0.075)) < 1.5
    same = generate_order_book(4000, 4000, np.random.default_rng(7))
    assert np.array_equal(b.job_value, same.job_value) and np.array_equal(b.node_end, same.node_end)
    with pytest.raises(ValueError, match="memory must be one of"):
        generate_order_book(3, 3, np.random.default_rng(0), memory="var")
