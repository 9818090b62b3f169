"""The mechanism registry: every registered mechanism runs by name, keeps the engine's
properties, and is refused with a way out when the jobs lack what it needs."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.analysis.metrics import copy_index
from marketsched.engine.properties import one_final_state, work_conserving, work_done
from marketsched.mechanisms.registry import Mechanism, Param, Unfit, get, missing, names, register, unregister
from marketsched.scenario import Jobs, Scenario, WorkloadSpec, prepare_jobs, run
from marketsched.workloads import split_parallel
from marketsched.workloads.attributes import draw, parse_model, with_estimates

BUILT_IN = ["hb", "nphb", "wspt", "wsept", "dlgm", "pdlgm", "ees", "relaxed-ees", "ps", "sh", "egg", "fcfs", "easy"]
# greedy list schedulers: no job waits while it fits (EES holds the machine for one job, DLGM
# queues per node, Egg's providers hold their own processors; the share markets run every job)
CONSERVING = {"hb", "nphb", "wspt", "wsept", "fcfs", "easy", "ps", "sh"}


@pytest.fixture(scope="module")
def small_jobs():
    # uniform values (>= 1) so that the share markets' ZIC bidders fit too
    return Scenario(WorkloadSpec(synthetic_jobs=250, synthetic_nodes=8), values="uniform", seed=3).build()


def test_every_built_in_is_registered_with_a_source():
    assert names()[: len(BUILT_IN)] == BUILT_IN
    for name in BUILT_IN:
        m = get(name)
        assert m.source and "seed" not in m.source.lower() and m.live
        assert ("(19" in m.source or "(20" in m.source), m.source  # cites author (year)


@pytest.mark.parametrize("name", BUILT_IN)
def test_properties_of_every_mechanism(name, small_jobs):
    out = run(small_jobs, name, events=True)
    w = small_jobs.workload
    assert not one_final_state(out.events, out.records)
    assert not work_done(out.events, w)
    if name in CONSERVING:
        cap = getattr(out.policy, "engine_capacity", None)
        assert not work_conserving(out.events, w, cap)
    again = run(small_jobs, name)
    assert again.records.equals(out.records)  # deterministic
    if name in ("dlgm", "pdlgm"):  # payments are transfers between jobs
        assert abs(out.records.payment.sum()) <= 1e-6 * np.abs(out.records.payment).sum() + 1e-6
    if get(name).utility is not None:
        u = get(name).utility(small_jobs, out)
        assert u.shape == (len(w),) and np.isfinite(u).all()


def test_relaxed_ees_discards_or_runs_everyone_and_ees_holds_the_machine(small_jobs):
    ees = run(small_jobs, "ees", events=True)
    ev = ees.events
    starts = ev[ev.event == "start"].time.to_numpy()
    ends = ev[ev.event == "finish"].time.to_numpy()
    # one job at a time: each start is at or after the previous job's end
    assert (np.sort(starts)[1:] >= np.sort(ends)[:-1] - 1e-9).all()
    assert abs(ees.records.payment.sum()) < 1e-6 * np.abs(ees.records.payment).sum() + 1e-6  # cached: balanced


def test_unfit_messages_name_the_way_out():
    parallel = WorkloadSpec(synthetic_jobs=60, synthetic_nodes=8, parallel=True).build()
    jobs = prepare_jobs(parallel, "uniform", 1)
    with pytest.raises(Unfit, match="--split"):
        run(jobs, "hb")
    run(prepare_jobs(split_parallel(parallel), "uniform", 1), "hb")  # split: fine
    w = WorkloadSpec(synthetic_jobs=60, synthetic_nodes=8).build()
    with pytest.raises(Unfit, match="--deadlines patience"):
        run(prepare_jobs(w, "uniform", 1, deadlines="none"), "ees")
    no_est = replace(w, runtime_estimate=np.full(len(w), np.nan))
    with pytest.raises(Unfit, match=r"60 of 60 jobs have no run-time estimate.*|--estimates exact"):
        run(prepare_jobs(no_est, "uniform", 1), "egg")
    frac = replace(w, submit_time=w.submit_time + 0.25)
    with pytest.raises(Unfit, match="--whole-seconds"):
        run(prepare_jobs(frac, "uniform", 1), "ps")
    low = prepare_jobs(w, "uniform", 1)
    low = Jobs(w, low.true_value * 0.001, low.bid, low.deadline)
    with pytest.raises(Unfit, match="--values uniform"):
        run(low, "sh")
    # several gaps at once are all named
    gaps = missing(get("egg"), prepare_jobs(replace(no_est, procs=parallel.procs[:60], capacity=8), "uniform", 1,
                                            deadlines="none"))
    assert len(gaps) == 3


def test_parameters_are_typed_and_checked(small_jobs):
    with pytest.raises(ValueError, match="unknown mechanism 'magic'"):
        get("magic")
    with pytest.raises(ValueError, match="has no parameter 'prcing'; its parameters: pricing"):
        get("hb").resolve({"prcing": "first"})
    with pytest.raises(ValueError, match="must be one of kth, first"):
        get("hb").resolve({"pricing": "second"})
    with pytest.raises(ValueError, match="must be a whole number"):
        get("ees").resolve({"n_draws": "1.5"})
    assert get("relaxed-ees").resolve({"compress": "false", "n_draws": "7"})["compress"] is False
    assert get("ees").resolve({"n_draws": 7})["n_draws"] == 7
    with pytest.raises(ValueError, match="finite number"):
        Param("x", float, 0.0, "").parse("nan")
    fixed = run(small_jobs, "relaxed-ees", {"compress": "false", "n_draws": "20"})
    assert fixed.label == "relaxed-ees(compress=False,n_draws=20)"
    assert run(small_jobs, "hb", {"pricing": "first"}).label == "hb/first"


def test_register_checks_the_declaration():
    with pytest.raises(ValueError, match="unknown need 'gpus'"):
        Mechanism("x", "x", "queue", "s", lambda jobs: None, needs=("gpus",))
    with pytest.raises(ValueError, match="unknown kind"):
        Mechanism("x", "x", "auction house", "s", lambda jobs: None)
    with pytest.raises(ValueError, match="already registered"):
        register(Mechanism("hb", "x", "queue", "s", lambda jobs: None))
    m = register(Mechanism("tmp-fcfs", "FCFS again", "queue", "test", get("fcfs").build, market=False))
    try:
        jobs = prepare_jobs(WorkloadSpec(synthetic_jobs=40, synthetic_nodes=4).build())
        assert run(jobs, "tmp-fcfs").records.equals(run(jobs, "fcfs").records)
    finally:
        unregister(m.name)


# ---------------------------------------------------------------------------- attribute models
def test_attribute_streams_are_independent_of_each_other_and_of_the_values():
    w = WorkloadSpec(synthetic_jobs=300, synthetic_nodes=8).build()
    a = prepare_jobs(w, "bimodal", 5, deadlines="patience", reliability="mix")
    b = prepare_jobs(w, "bimodal", 5, deadlines="slack", reliability="none")
    np.testing.assert_array_equal(a.true_value, b.true_value)  # common random numbers
    c = prepare_jobs(w, "bimodal", 5, deadlines="patience", reliability="none")
    np.testing.assert_array_equal(a.deadline, c.deadline)
    assert set(np.unique(a.min_reliability)) <= {0.0, 0.8, 0.95} and (b.min_reliability == 0).all()
    assert b.deadline is not None and np.allclose(b.deadline - w.submit_time, 3 * w.runtime)


def test_deadline_and_estimate_models():
    w = WorkloadSpec(synthetic_jobs=400, synthetic_nodes=8).build()
    d = draw("deadlines", "patience:lo=1,hi=12", w, 2) - w.submit_time
    assert (d >= w.runtime).all() and (d >= np.minimum(2 * w.runtime, 24 * 3600 - 1)).all()
    assert (d[w.runtime < 1800] <= 12 * 3600).all() and (d >= 3600).all()
    assert draw("deadlines", "none", w, 2) is None
    e = draw("estimates", "badness:f=3", w, 2)
    assert (e >= w.runtime).all() and (e <= 4 * w.runtime).all() and (e > w.runtime).mean() > 0.99
    np.testing.assert_array_equal(draw("estimates", "badness:f=0", w, 2), w.runtime)
    np.testing.assert_array_equal(with_estimates(w, "exact", 1).runtime_estimate, w.runtime)
    assert with_estimates(w, "trace", 1) is w
    for bad, msg in (("patience:lo=x", "must be a number"), ("slack:speed=2", "bad parameter"),
                     ("nope", "unknown deadlines model")):
        with pytest.raises(ValueError, match=msg):
            parse_model("deadlines", bad)
    with pytest.raises(ValueError, match="factor must be"):
        draw("deadlines", "slack:factor=0.5", w, 1)


def test_split_copies_share_their_draws():
    w = WorkloadSpec(synthetic_jobs=120, synthetic_nodes=16, parallel=True).build()
    s = split_parallel(w)
    for kind, model in (("deadlines", "patience"), ("estimates", "badness"), ("reliability", "mix")):
        whole = draw(kind, model, w, 9)
        np.testing.assert_array_equal(draw(kind, model, s, 9), whole[s.meta["parent"]])


def _copy_index_reference(parent):
    out, seen = [], {}
    for p in parent:
        out.append(seen.get(p, 0))
        seen[p] = seen.get(p, 0) + 1
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=30))
def test_copy_index_matches_a_plain_count(procs):
    from marketsched.workloads import Workload

    w = Workload.from_columns(submit_time=np.zeros(len(procs)), runtime=np.ones(len(procs)), procs=procs,
                              capacity=4)
    s = split_parallel(w)
    ci = copy_index(s)
    assert ci.tolist() == _copy_index_reference(s.meta["parent"].tolist())
    keys = set(zip(s.job_id.tolist(), ci.tolist()))
    assert len(keys) == len(s)  # (job_id, copy) is a unique key
