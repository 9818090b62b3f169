"""The incentive audit (marketsched.analysis.audit, `marketsched audit`) against what theory proves.

- First price (pay-as-bid) under highest bid first is not truthful: a job with the strictly
  highest bid that shades it but stays highest keeps its schedule and pays less while the
  machine is full, so the audit must find a profitable shading and print the case.
- k-th price under HB: the same job's payment is the integral of the best queued bid, which it
  never is, so the same shading gains exactly nothing.
- DLGM and P-DLGM (Stößer (2009), ch. 5, after Heydenreich, Müller & Uetz): truthful weight is a
  myopic best response and ex-post utility equals tentative utility when no job arrives later, so
  the last arrival never gains by misreporting its weight. (With later arrivals a lie can pay ex
  post: the thesis's Thm 5, no dominant-strategy payments exist; the audit finds such cases.)
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.analysis import audit as au
from marketsched.cli import main
from marketsched.scenario import Scenario, WorkloadSpec, prepare_jobs, run
from marketsched.workloads.workload import Workload


def _jobs(seed: int, n: int = 40, nodes: int = 3):
    return Scenario(WorkloadSpec(synthetic_jobs=n, synthetic_nodes=nodes, seed=seed), seed=seed).build()


def _plain_gain(jobs, mechanism, params, row, factor):
    """Quasi-linear true utility of ``row`` with its bid x factor minus truthful, from two plain runs."""
    def u(bid):
        r = run(prepare_jobs(jobs.workload, "bimodal", jobs.seed, bid=bid), mechanism, params).records
        return -jobs.true_value[row] * (r.end_time[row] - jobs.workload.submit_time[row]) - r.payment[row]
    bid = jobs.true_value.copy()
    bid[row] *= factor
    return u(bid) - u(jobs.true_value)


@st.composite
def contended(draw):
    """A small serial workload with ties, and the row of its strictly highest value."""
    n = draw(st.integers(4, 14))
    cap = draw(st.integers(1, 3))
    submit = np.cumsum(draw(st.lists(st.sampled_from([0, 0, 5, 20]), min_size=n, max_size=n)))
    runtime = draw(st.lists(st.sampled_from([10, 10, 50, 200]), min_size=n, max_size=n))
    value = np.array(draw(st.lists(st.sampled_from([1.0, 5.0, 5.0, 20.0, 80.0]), min_size=n, max_size=n)))
    top = draw(st.integers(0, n - 1))
    value[top] = 200.0
    w = Workload.from_columns(submit_time=submit, runtime=runtime, capacity=cap)
    return prepare_jobs(w, "bimodal", 1, bid=value), top


def _with_values(jobs):
    from dataclasses import replace

    return replace(jobs, true_value=jobs.bid.copy())


@settings(max_examples=40, deadline=None)
@given(contended(), st.sampled_from([0.5, 0.9, 0.99]))
def test_highest_bidder_shading_first_versus_kth_price(case, factor):
    jobs, top = case
    jobs = _with_values(jobs)
    jid = [int(jobs.workload.job_id[top])]
    dev = [au.Deviation("value", factor)]
    first = au.audit(jobs, "hb", {"pricing": "first"}, dev, job_ids=jid)
    kth = au.audit(jobs, "hb", {"pricing": "kth"}, dev, job_ids=jid)
    truthful = run(jobs, "hb", {"pricing": "first"})
    t0, t1 = truthful.records.first_start[top], truthful.records.end_time[top]
    # the shading pays under first price exactly when the job ran while the machine was full:
    # it then paid its bid instead of the reservation price 1 (Shudler et al. (2010), section IV)
    saved = truthful.records.payment[top] - (t1 - t0)
    assert first["gain"].iloc[0] == pytest.approx((1 - factor) * 200.0 * saved / (200.0 - 1.0), rel=1e-9, abs=1e-6)
    assert kth["gain"].iloc[0] == pytest.approx(0.0, abs=1e-6)


def test_first_price_audit_finds_a_profitable_shading_and_reproduces_it():
    jobs = Scenario(WorkloadSpec(synthetic_jobs=200, synthetic_nodes=8)).build()
    devs = au.Deviation.parse("value:0.5,0.8")
    table = au.audit(jobs, "hb", {"pricing": "first"}, devs, per_band=3, seed=1)
    assert set(table["band"]) == {"low", "middle", "high"}
    s = au.summary(table)
    assert (s["profitable"] > 0).all()
    by_band = au.summary(table, by=("kind", "amount", "band"))
    assert by_band["deviations"].sum() == len(table) and by_band["profitable"].sum() == s["profitable"].sum()
    best = table.loc[table["gain"].idxmax()]
    row = int(np.flatnonzero(jobs.workload.job_id == best["job_id"])[0])
    assert best["gain"] == pytest.approx(_plain_gain(jobs, "hb", {"pricing": "first"}, row, best["amount"]), rel=1e-9)
    again = au.audit(jobs, "hb", {"pricing": "first"}, [au.Deviation("value", best["amount"])],
                     job_ids=[int(best["job_id"])])
    assert again["gain"].iloc[0] == best["gain"]  # the printed case reproduces bit for bit


@pytest.mark.parametrize("mechanism", ["dlgm", "pdlgm"])
def test_dlgm_last_arrival_never_gains_by_misreporting_its_weight(mechanism):
    devs = au.Deviation.parse("value:0.3,0.7,0.95,1.05,1.5,3")
    gains = []
    for seed in range(10):
        jobs = _jobs(seed)
        t = au.audit(jobs, mechanism, {}, devs, job_ids=[int(jobs.workload.job_id[-1])])
        assert not au.profitable(t).any(), t
        gains += t["gain"].tolist()
    assert min(gains) < -1.0  # lies can cost: the check is not vacuous


def test_delay_moves_the_rows_and_zero_delay_changes_nothing():
    jobs = _jobs(3, n=30)
    rows = np.array([4])
    j2, r2 = au.deviate(jobs, rows, au.Deviation("delay", 1e4))
    assert np.all(np.diff(j2.workload.submit_time) >= 0)
    assert j2.workload.job_id[r2[0]] == jobs.workload.job_id[4]
    assert j2.true_value[r2[0]] == jobs.true_value[4]
    assert j2.workload.submit_time[r2[0]] == jobs.workload.submit_time[4] + 1e4
    t = au.audit(jobs, "hb", {}, [au.Deviation("delay", 0.0)], job_ids=[int(jobs.workload.job_id[4])])
    assert t["gain"].iloc[0] == 0.0


def test_split_job_copies_deviate_together():
    from marketsched.workloads import split_parallel
    from marketsched.workloads.synthetic import synthetic_workload

    w = split_parallel(synthetic_workload(30, capacity=8, parallel=True, seed=2))
    jobs = prepare_jobs(w, "bimodal", 1)
    focal = au.focal_jobs(jobs, 2, seed=1)
    for rows in focal:
        assert len(set(w.job_id[rows])) == 1 and len(rows) == int((w.job_id == w.job_id[rows[0]]).sum())


def test_wilson_interval_matches_the_formula():
    for k, n in [(0, 10), (3, 10), (10, 10), (7, 40)]:
        z = 1.959963984540054
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        assert au.wilson(k, n) == pytest.approx((centre - half, centre + half), abs=1e-9)


def test_bad_deviations_are_named():
    with pytest.raises(ValueError, match="KIND:AMOUNT"):
        au.Deviation.parse("value")
    with pytest.raises(ValueError, match="unknown kind 'deadline'"):
        au.Deviation.parse("deadline:2")
    with pytest.raises(ValueError, match="factor must be > 0"):
        au.Deviation.parse("value:0")


def test_cli_audit_prints_the_case(tmp_path):
    args = ["audit", "--mechanism", "hb", "--param", "pricing=first", "--synthetic-jobs", "200", "--synthetic-nodes",
            "8", "--per-band", "2", "--deviate", "value:0.5"]
    out = CliRunner().invoke(main, [*args, "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())  # the console wraps long lines
    assert "largest profitable lie: job" in text
    case = text.split("Reproduce: the same command with ")[1].split()
    again = CliRunner().invoke(main, [*args[:-2], *case[:4]])
    assert again.exit_code == 0, again.output
    gain = text.split("(gain ")[1].split(")")[0]
    assert f"(gain {gain})" in " ".join(again.output.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.csv", "summary-by-band.csv", "summary.csv", "value.png"]
    bad = CliRunner().invoke(main, ["audit", "--mechanism", "easy", "--synthetic-jobs", "20"])
    assert bad.exit_code != 0 and "takes no reports" in bad.output
