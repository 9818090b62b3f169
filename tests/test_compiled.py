"""The compiled kernels against the Python reference: the same records, bit for bit.

Each kernel (marketsched.engine._priority, ._backfilling) runs the engine loop and a rule in C;
the Python policies stay the reference. Random instances are full of ties (equal submit times,
bids, keys and run times, zero run times, missing estimates), and trace slices are compared
whole. These tests skip when the kernels are not built, except with MARKETSCHED_ENGINE=compiled,
where a missing kernel is a failure.
"""

import contextlib
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.engine import compiled
from marketsched.engine.events import RecordingSimulator
from marketsched.engine.records import Records
from marketsched.engine.simulator import Simulator
from marketsched.experiments.runner import BothPrices, simulate_pricings
from marketsched.mechanisms.online.backfilling import Backfilling
from marketsched.mechanisms.online.priority import RULES, make_priority_mechanism
from marketsched.scenario import WorkloadSpec, simulate, true_values
from marketsched.workloads.workload import Workload

KERNELS = ("_priority", "_backfilling")
pytestmark = pytest.mark.skipif(
    compiled.mode() != "compiled" and not all(compiled.available(k) for k in KERNELS),
    reason="the compiled kernels are not built (pip install -e . with a C compiler and Python headers)",
)


@contextlib.contextmanager
def engine(mode: str):
    """MARKETSCHED_ENGINE set to ``mode`` inside the block (hypothesis runs many examples per
    test, so this is a context manager rather than the function-scoped monkeypatch)."""
    old = os.environ.get("MARKETSCHED_ENGINE")
    os.environ["MARKETSCHED_ENGINE"] = mode
    try:
        yield
    finally:
        if old is None:
            del os.environ["MARKETSCHED_ENGINE"]
        else:
            os.environ["MARKETSCHED_ENGINE"] = old


def both_ways(w: Workload, make_policy):
    """Records of a fresh policy run by the Python engine, then by the compiled kernel, and the
    two Simulators (the compiled one must not have made the Python lists)."""
    out = []
    for mode in ("python", "compiled"):
        with engine(mode):
            sim = Simulator(w, make_policy())
            out.append((sim.run(), sim))
    (py, sim_py), (c, sim_c) = out
    assert "submit" in sim_py.__dict__ and "submit" not in sim_c.__dict__, "the compiled kernel did not run"
    assert sim_c.now == sim_py.now and sim_c.batches == sim_py.batches
    return py, c


def assert_same(a: Records, b: Records) -> None:
    for name, col in a.columns().items():
        other = b.columns()[name]
        assert col.dtype == other.dtype, name
        assert np.array_equal(col, other, equal_nan=col.dtype.kind == "f"), name
    assert a.payment.tolist() == b.payment.tolist()  # == per element: -0.0 == 0.0, but no rounding


@st.composite
def tied_instances(draw, parallel: bool):
    """Small workloads with many ties: submit times, run times, estimates and bids from short lists."""
    n = draw(st.integers(1, 40))
    capacity = draw(st.integers(1, 6))
    submit = sorted(draw(st.lists(st.integers(0, 12), min_size=n, max_size=n)))
    runtime = draw(st.lists(st.sampled_from([0.0, 0.25, 1.0, 2.0, 3.0, 7.5]), min_size=n, max_size=n))
    estimate = draw(st.lists(st.sampled_from([np.nan, 0.0, 1.0, 2.0, 4.0, 10.0]), min_size=n, max_size=n))
    procs = draw(st.lists(st.integers(1, capacity), min_size=n, max_size=n)) if parallel else [1] * n
    bid = draw(st.lists(st.sampled_from([-0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0]), min_size=n, max_size=n))
    w = Workload.from_columns(submit_time=submit, runtime=runtime, runtime_estimate=estimate, procs=procs,
                              capacity=capacity)
    return w, np.asarray(bid)


@settings(max_examples=200, deadline=None)
@given(tied_instances(parallel=False), st.sampled_from(RULES), st.sampled_from(["first", "kth", "kth-uncapped"]))
def test_priority_kernel_equals_python(inst, rule, pricing):
    w, bid = inst
    py, c = both_ways(w, lambda: make_priority_mechanism(rule, w, bid, pricing))
    assert_same(py, c)


@settings(max_examples=100, deadline=None)
@given(tied_instances(parallel=False), st.sampled_from(RULES))
def test_priority_kernel_both_prices_equal_python(inst, rule):
    # the experiments' first + k-th price on one schedule (runner.BothPrices)
    w, bid = inst
    kth = []

    def policy():
        both = BothPrices()
        kth.append(both)
        return make_priority_mechanism(rule, w, bid, both)

    py, c = both_ways(w, policy)
    assert_same(py, c)
    assert np.asarray(kth[0].kth_payment).tolist() == np.asarray(kth[1].kth_payment).tolist()


@settings(max_examples=100, deadline=None)
@given(tied_instances(parallel=False), st.sampled_from(RULES))
def test_priority_kernel_saturation_times_equal_python(inst, rule):
    # first price with each job's run time while the machine is full, and in all (the reproduction's
    # first-price revenue decomposition)
    from marketsched.mechanisms.online.pricing import FirstPriceSaturation

    w, bid = inst
    schemes = []

    def policy():
        schemes.append(FirstPriceSaturation())
        return make_priority_mechanism(rule, w, bid, schemes[-1])

    py, c = both_ways(w, policy)
    assert_same(py, c)
    for name in ("full", "ran"):
        assert np.asarray(getattr(schemes[0], name)).tolist() == getattr(schemes[1], name).tolist(), name


@settings(max_examples=200, deadline=None)
@given(tied_instances(parallel=True), st.booleans())
def test_backfilling_kernel_equals_python(inst, backfill):
    w, _ = inst
    policies = []

    def policy():
        policies.append(Backfilling(backfill))
        return policies[-1]

    py, c = both_ways(w, policy)
    assert_same(py, c)
    assert policies[0].fallback_estimates == policies[1].fallback_estimates


def _slice(trace, jobs, split, capacity=1.0):
    return WorkloadSpec(trace=trace, split=split, jobs=jobs, capacity=capacity).build()


@pytest.mark.trace
@pytest.mark.parametrize("trace, jobs, split, capacity", [
    ("SDSC-SP2-1998-4.2-cln", 1500, True, 1.0),
    ("LPC-EGEE-2004-1.2-cln", 8000, False, 0.75),
    ("HPC2N-2002-2.2-cln", 1000, True, 1.0),
])
def test_priority_kernel_on_trace_slices(trace, jobs, split, capacity, trace_path):
    trace_path(trace)
    w = _slice(trace, jobs, split, capacity)
    values = true_values(w, "bimodal", 1)
    for rule in RULES:
        for pricing in ("first", "kth", "kth-uncapped"):
            recs = []
            for mode in ("python", "compiled"):
                with engine(mode):
                    recs.append(simulate(w, rule, values, pricing))
            assert_same(*recs)
        with engine("python"):
            py = simulate_pricings(w, rule, values, ["first", "kth"])
        with engine("compiled"):
            c = simulate_pricings(w, rule, values, ["first", "kth"])
        assert_same(py["first"], c["first"])
        assert_same(py["kth"], c["kth"])


@pytest.mark.trace
@pytest.mark.parametrize("trace, jobs, split", [
    ("SDSC-SP2-1998-4.2-cln", None, False),
    ("LPC-EGEE-2004-1.2-cln", 20000, False),
    ("HPC2N-2002-2.2-cln", 20000, False),
    ("HPC2N-2002-2.2-cln", 3000, True),
])
def test_backfilling_kernel_on_trace_slices(trace, jobs, split, trace_path):
    trace_path(trace)
    w = _slice(trace, jobs, split)
    for mechanism in ("fcfs", "easy"):
        recs = []
        for mode in ("python", "compiled"):
            with engine(mode):
                recs.append(simulate(w, mechanism))
        assert_same(*recs)


def test_engine_mode_is_read_and_checked():
    with engine("python"):
        assert compiled.kernel("_priority") is None
    with engine("auto"):
        assert compiled.kernel("_no_such_kernel") is None
    with engine("compiled"):
        with pytest.raises(RuntimeError, match="marketsched.engine._no_such_kernel is not built"):
            compiled.kernel("_no_such_kernel")
    with engine("fast"), pytest.raises(ValueError, match="MARKETSCHED_ENGINE='fast'"):
        compiled.mode()


def test_only_a_whole_run_of_a_plain_simulator_is_compiled():
    w = Workload.from_columns(submit_time=[0, 0, 1, 1], runtime=[3, 1, 0, 2], capacity=1)
    bid = np.array([1.0, 2.0, 2.0, 5.0])
    with engine("python"):
        reference = Simulator(w, make_priority_mechanism("hb", w, bid)).run()
    with engine("compiled"):
        cut = Simulator(w, make_priority_mechanism("hb", w, bid))
        cut.run(until=10)  # a run with an end time takes the Python path
        assert "submit" in cut.__dict__
        recorder = RecordingSimulator(w, make_priority_mechanism("hb", w, bid))
        assert_same(recorder.run(), reference)  # the event log needs the Python path
        assert len(recorder.events())


def test_compiled_run_checks_what_bind_checks():
    w = Workload.from_columns(submit_time=[0, 1], runtime=[1, 1], procs=[1, 2], capacity=2)
    with engine("compiled"), pytest.raises(ValueError, match="job row 1 needs 2 processors"):
        Simulator(w, make_priority_mechanism("hb", w, [1.0, 2.0])).run()
    est = np.array([1.0, -1.0])
    with engine("compiled"), pytest.raises(ValueError, match="estimate of job row 1 is -1.0;"):
        Simulator(w, Backfilling(True, est)).run()


def _peak_running(records: Records) -> int:
    """The most jobs running at once (jobs run in one piece: no preemption in these rules)."""
    ran = ~np.isnan(records.first_start)
    times = np.concatenate([records.first_start[ran], records.end_time[ran]])
    steps = np.concatenate([np.ones(ran.sum(), np.int64), -np.ones(ran.sum(), np.int64)])
    order = np.lexsort((steps, times))  # at equal times the ends first
    return int(np.cumsum(steps[order]).max())


def _wide(seed: int, n: int, capacity: int, parallel: bool, ties: bool) -> Workload:
    """A wide machine with thousands of jobs running at once. With ``ties``: integer submit times
    (many equal), run times and estimates from short lists (many equal estimated ends), some zero
    run times; without: estimates drawn from a continuous range, so that each start lands anywhere
    in the order of the running jobs' estimated ends. With ``parallel``, a few jobs wide enough
    that the queue head's reservation walks over many running jobs."""
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.integers(0, n // 400, size=n)).astype(float)
    runtime = rng.choice([0.0, 1.0, 5.0, 20.0, 40.0, 90.0], size=n)
    if ties:
        estimate = rng.choice([np.nan, 10.0, 30.0, 60.0, 100.0], size=n)
    else:
        estimate = np.maximum(runtime, rng.uniform(0.0, 200.0, size=n))
    procs = np.ones(n, dtype=np.int64)
    if parallel:
        wide = rng.random(n) < 0.005
        procs[wide] = rng.choice([capacity // 8, capacity // 4, capacity // 2], size=int(wide.sum()))
    return Workload.from_columns(submit_time=submit, runtime=runtime, runtime_estimate=estimate, procs=procs,
                                 capacity=capacity)


@pytest.mark.parametrize("seed, ties", [(1, True), (2, True), (3, False)])
def test_backfilling_kernel_on_a_wide_machine(seed, ties):
    # thousands of running jobs: the kernel's ordered set of estimated ends splits and merges its
    # blocks many times, and the walks to the shadow time cross block boundaries
    w = _wide(seed, n=16000, capacity=3000, parallel=True, ties=ties)
    for backfill in (False, True):
        py, c = both_ways(w, lambda: Backfilling(backfill))
        assert_same(py, c)
    assert _peak_running(py) >= 1500


@pytest.mark.parametrize("seed, ties", [(1, True), (2, True), (3, False)])
def test_nphb_kth_kernel_on_a_wide_machine(seed, ties):
    # the non-preemptive rules under the k-th price keep the running jobs ordered by priority;
    # thousands at once, with many equal bids (or, without ties, bids from a continuous range)
    w = _wide(seed, n=16000, capacity=2500, parallel=False, ties=ties)
    rng = np.random.default_rng(seed)
    bid = rng.choice([0.5, 1.0, 2.0, 3.0], size=len(w)) if ties else rng.uniform(0.0, 3.0, size=len(w))
    for rule in ("nphb", "wsept"):
        both = []

        def policy():
            both.append(BothPrices())
            return make_priority_mechanism(rule, w, bid, both[-1])

        py, c = both_ways(w, policy)
        assert_same(py, c)
        assert np.asarray(both[0].kth_payment).tolist() == np.asarray(both[1].kth_payment).tolist()
    assert _peak_running(py) >= 1500


def test_every_built_kernel_is_newer_than_its_sources():
    """An extension is optional at install (setup.py): one that no longer compiles leaves the
    previous build in place in an editable tree, and its stale code then runs silently. Every
    kernel found built must be at least as new as its C file and the shared kernel headers it
    includes."""
    import importlib.util
    import re
    from pathlib import Path

    import marketsched

    root = Path(marketsched.__file__).parent
    headers = sorted((root / "engine").glob("kernel_*.h"))
    setup = (root.parents[1] / "setup.py")
    if not setup.exists():
        pytest.skip("not a source tree (an installed wheel has no C sources)")
    sources = re.findall(r'"(src/marketsched/[\w/]+\.c)"|f"\{ENGINE\}/(\w+\.c)"', setup.read_text())
    stale, checked = [], 0
    for a, b in sources:
        c = root.parents[1] / (a or f"src/marketsched/engine/{b}")
        module = "marketsched." + str(c.relative_to(root.parent).with_suffix("")).replace("/", ".")[len("marketsched."):]
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None or not spec.origin.endswith(".so"):
            continue  # not built here (no compiler): the Python path runs, and says so
        built = os.path.getmtime(spec.origin)
        text = c.read_text()
        shared = re.search(r'#include "[^"]*kernel_\w+\.h"', text)  # they include one another
        deps = [c, *(headers if shared else ())]
        stale += [f"{module} ({spec.origin}) is older than {d.name}" for d in deps if os.path.getmtime(d) > built]
        checked += 1
    assert checked or not sources
    assert not stale, "rebuild the kernels (pip install -e .; with -v it shows a kernel that fails to compile): " + "; ".join(stale)
