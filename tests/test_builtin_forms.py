"""The built-in scenario serves every registered mechanism, each in its paper's form."""

import numpy as np
import pytest

from marketsched.mechanisms.registry import get, missing, names
from marketsched.scenario import Scenario, in_form, run, split_jobs, whole_machine
from marketsched.workloads.synthetic import synthetic_workload


@pytest.fixture(scope="module")
def jobs():
    return Scenario.builtin(400, 16, seed=2).build()


def test_builtin_is_parallel_with_values_from_one_and_deterministic(jobs):
    w = jobs.workload
    assert jobs.forms and w.procs.max() > 1 and w.procs.max() <= 16 // 4
    assert (jobs.true_value >= 1).all() and jobs.deadline is not None
    again = Scenario.builtin(400, 16, seed=2).build()
    for name in ("submit_time", "runtime", "runtime_estimate", "procs"):
        np.testing.assert_array_equal(getattr(w, name), getattr(again.workload, name))
    np.testing.assert_array_equal(jobs.true_value, again.true_value)
    np.testing.assert_array_equal(jobs.deadline, again.deadline)


def test_every_registered_mechanism_fits_its_form(jobs):
    for name in names():
        formed, form = in_form(jobs, name)
        assert missing(get(name), formed) == [], name
        assert formed.form == form and not formed.forms
        assert in_form(formed, name) == (formed, form)  # already formed: unchanged
    assert in_form(jobs, "hb")[1] == "split" and in_form(jobs, "egg")[1] == "split"
    assert in_form(jobs, "ees")[1] == "whole machine"
    for name in ("relaxed-ees", "ps", "sh", "fcfs", "easy"):
        assert in_form(jobs, name)[1] == "as given"


def test_ees_holds_the_whole_machine_when_the_builtin_jobs_are_serial():
    jobs = Scenario.builtin(200, 4).build()  # a quarter of four processors: every job serial
    assert (jobs.workload.procs == 1).all()
    formed, form = in_form(jobs, "ees")
    assert form == "whole machine" and (formed.workload.procs == 4).all()
    np.testing.assert_allclose(formed.workload.runtime * 4, jobs.workload.runtime)
    assert in_form(jobs, "hb")[1] == "as given" and in_form(jobs, "relaxed-ees")[1] == "as given"


def test_without_forms_the_jobs_run_as_given():
    jobs = Scenario(Scenario.builtin(100, 8).workload).build()
    assert not jobs.forms and in_form(jobs, "hb") == (jobs, "as given")


def test_split_keeps_each_jobs_attributes(jobs):
    s = split_jobs(jobs)
    parent = s.workload.meta["parent"]
    assert len(s.workload) == int(jobs.workload.procs.sum()) and (s.workload.procs == 1).all()
    for name in ("true_value", "bid", "deadline", "min_reliability"):
        np.testing.assert_array_equal(getattr(s, name), getattr(jobs, name)[parent])
    np.testing.assert_array_equal(s.workload.submit_time, jobs.workload.submit_time[parent])


def test_whole_machine_keeps_processor_seconds_and_deadlines(jobs):
    wm = whole_machine(jobs)
    w, x = jobs.workload, wm.workload
    assert (x.procs == w.capacity).all() and x.capacity == w.capacity
    np.testing.assert_allclose(x.runtime * x.procs, w.runtime * w.procs)
    np.testing.assert_allclose(x.runtime_estimate * x.procs, w.runtime_estimate * w.procs)
    assert (x.runtime_estimate >= x.runtime).all()
    np.testing.assert_array_equal(wm.deadline, jobs.deadline)
    np.testing.assert_array_equal(x.submit_time, w.submit_time)


def test_runs_record_their_form_and_easy_backfills(jobs):
    hb, ees, fcfs, easy = (run(jobs, m) for m in ("hb", "ees", "fcfs", "easy"))
    assert (hb.form, ees.form, fcfs.form) == ("split", "whole machine", "as given")
    assert len(hb.records.state) == len(hb.jobs.workload) == int(jobs.workload.procs.sum())
    # parallel jobs with estimates: EASY starts some job earlier than FCFS does
    assert (easy.records.first_start < fcfs.records.first_start).any()
    assert ees.records.state.size == len(jobs.workload)


def test_forms_round_trip_through_the_scenario_description():
    sc = Scenario.builtin(50, 8, seed=3)
    back = Scenario.from_dict(sc.describe())
    assert back.forms and back.values == "bimodal-1" and back.workload.max_procs == 2
    assert Scenario.from_dict({**sc.describe(), "forms": False}).forms is False


def test_synthetic_max_procs_bounds_the_widths():
    w = synthetic_workload(2000, capacity=64, parallel=True, max_procs=16, seed=1)
    assert set(np.unique(w.procs)) == {1, 2, 4, 8, 16}
    with pytest.raises(ValueError, match="max_procs"):
        synthetic_workload(10, capacity=8, parallel=True, max_procs=9)
    # the default (the whole machine) draws the same jobs as before the parameter existed
    a = synthetic_workload(300, capacity=16, parallel=True, seed=4)
    b = synthetic_workload(300, capacity=16, parallel=True, max_procs=16, seed=4)
    np.testing.assert_array_equal(a.procs, b.procs)


def test_an_audit_of_the_builtin_scenario_runs_the_mechanisms_form():
    from marketsched.analysis import audit as au

    jobs = Scenario.builtin(40, 8, seed=2).build()
    t = au.audit(jobs, "hb", {"pricing": "first"}, au.Deviation.parse("value:0.5"), per_band=1)
    split = in_form(jobs, "hb")[0]
    assert len(t) and set(t["job_id"]) <= set(split.workload.job_id.tolist())
