"""The compiled DLGM / P-DLGM kernel against the Python reference, bit for bit.

``DLGM.compiled_run`` (C, ``_dlgm_kernel.c``) must give exactly the records of the pure-Python
policy on the engine (``Simulator.begin/proceed/conclude``, which never takes a compiled path):
first start, end time, preemptions, payment and state, and the arrays callers read after a run
(tentative completion and payment, received credits, node, preemption count). Floats are
compared with ``==`` (NaN where NaN), on random instances full of ties (equal submit times,
equal ratios, zero run times, repeated copies of one job) and real-valued weights and run times
(so that a different summation order shows), and on trace slices compared whole.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.dlgm import START_RULES, make_dlgm
from marketsched.workloads import read_swf, scale_capacity, split_parallel, to_workload
from marketsched.workloads.workload import Workload
from reference_dlgm import wide_instances
from test_compiled import engine

try:
    from marketsched.mechanisms.online import _dlgm_kernel  # noqa: F401
except ImportError:
    if os.environ.get("MARKETSCHED_ENGINE") == "compiled":
        raise
    pytest.skip("the DLGM kernel is not built (pip install -e . with gcc and the Python headers)",
                allow_module_level=True)

AFTER_RUN = ("tentative_completion", "tentative_payment", "received", "node")


def reference_run(w, policy):
    """The pure-Python path, whatever MARKETSCHED_ENGINE says: ``(records, simulator)``."""
    sim = Simulator(w, policy)
    sim.begin()
    sim.proceed()
    return sim.conclude(), sim


def assert_identical(w, bid, preemptive, **kwargs):
    ref_policy = make_dlgm(w, bid, preemptive, **kwargs)
    ref, ref_sim = reference_run(w, ref_policy)
    policy = make_dlgm(w, bid, preemptive, **kwargs)
    sim = Simulator(w, policy)
    with engine("compiled"):  # the kernel, whatever mode the suite runs in
        got = policy.compiled_run(sim)
    assert got is not None, "the kernel declined a configuration it covers"
    for name, a in ref.columns().items():
        b = got.columns()[name]
        assert a.dtype == b.dtype, name
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), (name, a, b)
    for name in AFTER_RUN:
        a, b = getattr(ref_policy, name), getattr(policy, name)
        assert a.dtype == b.dtype, name
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), (name, a, b)
    assert policy.preemption_count == ref_policy.preemption_count
    assert sim.now == ref_sim.now  # the last event's time
    assert sim.batches == ref_sim.batches  # the engine's batches, one per time stamp
    return ref


# ---------------------------------------------------------------------------- random instances
def _values(draw, n, pool):
    """n values drawn from a small pool (ties) of whole and real numbers."""
    return draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))


@st.composite
def instances(draw):
    n = draw(st.integers(1, 40))
    m = draw(st.integers(1, 4))
    submit = sorted(_values(draw, n, [0.0, 0.0, 0.5, 1.0, 1.0, 1.3, 2.0, 3.7, 4.0, 6.1, 9.0]))
    runtime = _values(draw, n, [0.0, 0.1, 0.2, 0.3, 0.7, 1.0, 1.0, 2.0, 2.5, 3.0, 4.0, 1e-9])
    procs = [min(p, m) for p in _values(draw, n, [1, 1, 1, 1, 2, 3])]
    w = split_parallel(Workload.from_columns(submit_time=submit, runtime=runtime, procs=procs, capacity=m))
    # weights: whole, real, zero, and some proportional to the run time (equal ratios)
    weight = np.array(_values(draw, n, [0.0, 0.1, 0.3, 1.0, 1.0, 2.0, 3.0, 0.7, 5.5]))[w.meta["parent"]]
    if draw(st.booleans()):
        weight = np.where(np.arange(len(w)) % 2 == 0, weight, 1.5 * w.runtime)
    kwargs = dict(start_rule=draw(st.sampled_from(START_RULES)), max_buckets=draw(st.sampled_from([1, 2, 3, 5, None])))
    if draw(st.booleans()):
        kwargs["true_value"] = np.array(_values(draw, len(w), [0.0, 0.2, 1.0, 2.5, 4.0]))
        kwargs["node_choice"] = draw(st.sampled_from(["true", "report"]))
    return w, weight, draw(st.booleans()), kwargs


@settings(max_examples=200, deadline=None)
@given(instances())
def test_kernel_matches_reference(inst):
    w, weight, preemptive, kwargs = inst
    assert_identical(w, weight, preemptive, **kwargs)


@settings(max_examples=100, deadline=None)
@given(instances(), st.data())
def test_kernel_matches_reference_with_node_lies(inst, data):
    # a job forced onto a node, and jobs joining their r-th best node (the audit's node lies)
    w, weight, preemptive, kwargs = inst
    n, m = len(w), w.capacity
    kwargs["force_node"] = {data.draw(st.integers(0, n - 1)): data.draw(st.integers(0, m - 1))}
    kwargs["node_rank"] = data.draw(st.lists(st.integers(1, m), min_size=n, max_size=n))
    assert_identical(w, weight, preemptive, **kwargs)


@settings(max_examples=100, deadline=None)
@given(wide_instances(), st.booleans(), st.sampled_from(START_RULES))
def test_kernel_matches_reference_on_wide_spreads(inst, preemptive, rule):
    # weights 10^0..10^16 and 0.1, 0.2, 0.3, 1/3, times up to 2^40: the compensated cells of the
    # queue sums are updated alike, rounding error for rounding error
    submit, runtime, bid, nodes = inst
    w = Workload.from_columns(submit_time=submit, runtime=runtime, capacity=nodes)
    assert_identical(w, bid, preemptive, start_rule=rule)


def test_kernel_by_hand():
    # Two nodes (the hand-worked instance of test_dlgm): P-DLGM preempts job 0 once.
    w = Workload.from_columns(submit_time=[0, 0, 1, 1, 2], runtime=[4, 2, 3, 1, 2], capacity=2)
    ref = assert_identical(w, [1, 3, 3, 2, 1], True)
    assert ref.preemptions.tolist() == [1, 0, 0, 0, 0]
    assert ref.payment.tolist() == [-3, 0, 3, 0, 0]


def test_declines_what_it_does_not_cover():
    with engine("compiled"):  # declines, not the suite's mode
        _declines()


def _declines():
    w = Workload.from_columns(submit_time=[0, 0], runtime=[1, 2], capacity=1)
    assert make_dlgm(w, [1, 2]).compiled_run(Simulator(w, None)) is not None  # covered: the kernel runs
    assert make_dlgm(w, [1, 2], record_offers=True).compiled_run(Simulator(w, None)) is None
    # a negative zero (allowed: weights >= 0) keeps its sign in the reference only
    assert make_dlgm(w, [-0.0, 2]).compiled_run(Simulator(w, None)) is None
    rec = Simulator(w, make_dlgm(w, [-0.0, 2])).run()  # the Python path runs instead
    assert rec.end_time.tolist() == [1, 3]
    # a subclass may change a step the kernel does not know: it keeps the Python path
    policy = make_dlgm(w, [1, 2])
    policy.__class__ = type("Mine", (type(policy),), {})
    assert policy.compiled_run(Simulator(w, None)) is None


def test_engine_mode_python_never_takes_the_kernel(monkeypatch):
    w = Workload.from_columns(submit_time=[0, 0], runtime=[1, 2], capacity=1)
    policy = make_dlgm(w, [1, 2])
    monkeypatch.setenv("MARKETSCHED_ENGINE", "python")
    Simulator(w, policy).run()
    assert hasattr(policy, "queue")  # bound and stepped by the engine
    policy = make_dlgm(w, [1, 2])
    monkeypatch.setenv("MARKETSCHED_ENGINE", "auto")
    Simulator(w, policy).run()
    assert not hasattr(policy, "queue")


def test_missing_kernel(monkeypatch):
    # the module not built: the Python path in mode auto, a clear error in mode compiled
    import sys

    import marketsched.mechanisms.online as package

    w = Workload.from_columns(submit_time=[0, 0], runtime=[1, 2], capacity=1)
    monkeypatch.setitem(sys.modules, "marketsched.mechanisms.online._dlgm_kernel", None)
    monkeypatch.delattr(package, "_dlgm_kernel")
    monkeypatch.setenv("MARKETSCHED_ENGINE", "auto")
    assert make_dlgm(w, [1, 2]).compiled_run(Simulator(w, None)) is None
    assert Simulator(w, make_dlgm(w, [1, 2])).run().end_time.tolist() == [1, 3]
    monkeypatch.setenv("MARKETSCHED_ENGINE", "compiled")
    with pytest.raises(RuntimeError, match="_dlgm_kernel"):
        Simulator(w, make_dlgm(w, [1, 2])).run()


# ---------------------------------------------------------------------------- trace slices
@pytest.mark.trace
def test_kernel_on_lpc_slices(trace_path):
    # LPC-EGEE with real-valued (bimodal) weights, on all its nodes and on 10% (long queues)
    from marketsched.scenario import true_values

    whole, _ = to_workload(read_swf(trace_path("LPC-EGEE-2004-1.2-cln")))
    for capacity in (1.0, 0.1):
        w = scale_capacity(whole.take(np.arange(40_000, 50_000)), capacity)
        v = true_values(w, "bimodal", seed=5)
        for preemptive in (False, True):
            rec = assert_identical(w, v, preemptive)
            assert (rec.preemptions.sum() > 0) == preemptive


@pytest.mark.trace
def test_kernel_on_hpc2n_split_slice(trace_path):
    # HPC2N with its parallel jobs split into serial copies (many equal ratios, same-time
    # arrivals), uniform whole weights and bimodal real ones, both start rules
    from marketsched.scenario import true_values

    w, _ = to_workload(read_swf(trace_path("HPC2N-2002-2.2-cln")))
    w = split_parallel(w.take(np.arange(20_000, 24_000)))
    for model in ("uniform", "bimodal"):
        v = true_values(w, model, seed=1)
        for preemptive in (False, True):
            for rule in START_RULES:
                assert_identical(w, v, preemptive, start_rule=rule)
