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
- Claims: every incentive property a mechanism declares in the registry gets a verdict by one
  rule (:func:`marketsched.analysis.audit.claim_verdicts`), checked here on hand-made tables;
  Egg (Kang & Parkes (2007), Theorem 1) must hold on a sample where a report-dependent price
  level once let a shading job pay less.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.analysis import audit as au
from marketsched.cli import main
from marketsched.mechanisms.registry import get as get_mechanism
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


@pytest.mark.parametrize("mechanism", ["dlgm", "pdlgm"])
def test_dlgm_last_arrival_never_gains_by_choosing_another_node(mechanism):
    """Stößer (2009), Theorems 1 and 3: joining the node of the largest tentative utility is a
    myopic best response; with no later arrival the tentative utility is the ex-post one, so the
    last arrival never gains by joining its second, third or fourth best node."""
    devs = au.Deviation.parse("node:2,3,4")
    gains = []
    for seed in range(10):
        jobs = _jobs(seed, nodes=4)
        t = au.audit(jobs, mechanism, {}, devs, job_ids=[int(jobs.workload.job_id[-1])])
        assert not au.profitable(t).any(), t
        gains += t["gain"].tolist()
    assert min(gains) < -1.0  # another node can cost: the check is not vacuous


def test_node_lie_joins_the_ranked_node():
    jobs = _jobs(5, n=30, nodes=3)
    row = 20
    node = {r: run(au.deviate(jobs, np.array([row]), au.Deviation("node", r))[0], "dlgm", {}).policy.node[row]
            for r in (1, 2, 3)}
    assert node[1] == run(jobs, "dlgm", {}).policy.node[row]  # rank 1 is the truthful choice
    assert set(node.values()) == {0, 1, 2}  # each rank is another node


def test_ees_deadline_lies_pay_on_one_instance_and_the_case_is_printed():
    """EES (Mutz (2008), ch. 4) is truthful only in Bayes-Nash equilibrium: on one instance a job
    can gain by misreporting its deadline (the value of running it, v = w x time to the
    deadline); the audit finds such a lie, prints it, and the printed case reproduces."""
    args = ["audit", "--mechanism", "ees", "--param", "n_draws=20", "--synthetic-jobs", "60", "--synthetic-nodes",
            "4", "--seed", "2", "--per-band", "3", "--audit-seed", "2", "--deviate", "deadline:0.5,2"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "largest profitable lie: job" in text and "--deviate deadline:" in text
    assert "-> consistent: mean gain" in text  # Bayes-Nash: single lies that pay do not contradict it
    case = text.split("Reproduce: the same command with ")[1].split()
    again = CliRunner().invoke(main, [*args[:-2], *case[:4]])
    gain = text.split("(gain ")[1].split(")")[0]
    assert f"(gain {gain})" in " ".join(again.output.split())


def test_egg_deadline_lies_do_not_pay_on_a_sample():
    """Kang & Parkes (2007), Theorem 1: a deadline is part of the reported value schedule, which
    truthful Egg users have no reason to misreport."""
    jobs = Scenario(WorkloadSpec(synthetic_jobs=200, synthetic_nodes=8, seed=0), seed=1).build()
    t = au.audit(jobs, "egg", {}, au.Deviation.parse("deadline:0.5,0.8,1.25,2"), job_ids=[76, 78, 99])
    (verdict,) = au.claim_verdicts(t, get_mechanism("egg").claims)
    assert verdict["verdict"] == "holds on this sample", verdict["text"]
    assert verdict["lies"] == 12 and t["gain"].min() < 0  # lies can cost: the check is not vacuous


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


def test_bad_deviations_are_named():
    with pytest.raises(ValueError, match="KIND:AMOUNT"):
        au.Deviation.parse("value")
    with pytest.raises(ValueError, match="unknown kind 'deadlines'"):
        au.Deviation.parse("deadlines:2")
    with pytest.raises(ValueError, match="factor must be > 0"):
        au.Deviation.parse("value:0")
    with pytest.raises(ValueError, match="factor must be > 0"):
        au.Deviation.parse("deadline:0")
    with pytest.raises(ValueError, match="rank must be a whole number >= 1"):
        au.Deviation.parse("node:1.5")
    jobs = _jobs(1, n=20)
    with pytest.raises(ValueError, match="hb takes no deadlines"):
        au.audit(jobs, "hb", {}, au.Deviation.parse("deadline:2"))
    with pytest.raises(ValueError, match="hb does not let jobs choose their node"):
        au.audit(jobs, "hb", {}, au.Deviation.parse("node:2"))
    with pytest.raises(ValueError, match="rank 9, but there are 3 nodes"):
        au.audit(jobs, "dlgm", {}, au.Deviation.parse("node:9"), per_band=1)


def test_cli_audit_prints_the_case(tmp_path):
    args = ["audit", "--mechanism", "hb", "--param", "pricing=first", "--synthetic-jobs", "200", "--synthetic-nodes",
            "8", "--per-band", "2", "--deviate", "value:0.5"]
    out = CliRunner().invoke(main, [*args, "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())  # the console wraps long lines
    assert "largest profitable lie: job" in text
    case = text.split("Reproduce: the same command with ")[1].split()
    again = CliRunner().invoke(main, [*args[:-2], *case[:4], "--rerun", "full"])  # from the start: the same gain
    assert again.exit_code == 0, again.output
    gain = text.split("(gain ")[1].split(")")[0]
    assert f"(gain {gain})" in " ".join(again.output.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.csv", "claims.csv", "summary-by-band.csv",
                                                          "summary.csv", "value.png"]
    assert "hb claims no incentive property" in text
    bad = CliRunner().invoke(main, ["audit", "--mechanism", "easy", "--synthetic-jobs", "20"])
    assert bad.exit_code != 0 and "takes no reports" in bad.output


# ---------------------------------------------------------------------------- claims and verdicts
def _table(rows):
    """Audit rows (kind, amount, truthful, deviating) -> the audit's table."""
    import pandas as pd

    return pd.DataFrame([{"job_id": i, "band": "low", "true_value": 1.0, "copies": 1, "kind": k, "amount": a,
                          "truthful": u0, "deviating": u1, "gain": u1 - u0} for i, (k, a, u0, u1) in enumerate(rows)])


def test_claim_verdicts_follow_one_rule():
    from marketsched.mechanisms.registry import Claim

    dom = Claim("truthful", "dominant", ("value", "estimate>=1"), "a paper")
    bn = Claim("bn", "bayes-nash", ("value",), "a paper")
    my = Claim("myopic", "myopic", ("value",), "a paper")
    delay = Claim("no delay", "dominant", ("delay",), "a paper")
    # one value lie pays 5; estimate 0.5 pays more but is outside "estimate>=1"; factor 1 is the truth
    t = _table([("value", 0.5, -10, -5), ("value", 2, -10, -12), ("value", 1, -10, 0),
                ("estimate", 0.5, -10, 90), ("estimate", 2, -10, -11)])
    v = {x["claim"]: x for x in au.claim_verdicts(t, [dom, bn, my, delay])}
    assert v["truthful"]["verdict"] == "violated" and v["truthful"]["lies"] == 3 and v["truthful"]["paid"] == 1
    assert "largest gain 5 by job 0 (value 0.5)" in v["truthful"]["text"]
    assert v["bn"]["verdict"] == "consistent" and v["bn"]["lies"] == 2  # mean gain 1.5, interval spans 0
    assert v["myopic"]["verdict"] == "not testable ex post" and "1 of 2 lies paid" in v["myopic"]["text"]
    assert v["no delay"]["verdict"] == "not audited"
    honest = _table([("value", 0.5, -10, -10), ("value", 2, -10, -12), ("estimate", 3, -1, -1)])
    assert au.claim_verdicts(honest, [dom])[0]["verdict"] == "holds on this sample"
    gains = _table([("value", 0.5, -10, -10 + g) for g in (4.0, 5.0, 6.0, 5.5, 4.5)])
    assert au.claim_verdicts(gains, [bn])[0]["verdict"] == "contradicted"


def test_registry_claims_name_audit_deviations_and_known_strengths():
    from marketsched.mechanisms.registry import STRENGTHS, Claim, mechanisms

    claimed = {m.name: m.claims for m in mechanisms() if m.claims}
    assert {"dlgm", "pdlgm", "ees", "egg"} <= set(claimed)
    for claims in claimed.values():
        for c in claims:
            assert c.strength in STRENGTHS and c.source
            assert {Claim.bounds(lie)[0] for lie in c.lies} <= set(au.KINDS)
    with pytest.raises(ValueError, match="unknown strength"):
        Claim("x", "probably", ("value",), "a paper")


def test_egg_value_lies_do_not_pay_on_a_sample():
    """Kang & Parkes (2007), Theorem 1. With providers' prices scaled by the mean *reported* value,
    job 76 of this workload gained by halving its value (it lowered every price); the price level
    now follows the true values, which no report changes."""
    jobs = Scenario(WorkloadSpec(synthetic_jobs=200, synthetic_nodes=8, seed=0), seed=1).build()
    t = au.audit(jobs, "egg", {}, au.Deviation.parse("value:0.5,0.8,1.25,2") + au.Deviation.parse("estimate:1.5,3"),
                 job_ids=[76, 78, 99])
    (verdict,) = au.claim_verdicts(t, get_mechanism("egg").claims)
    assert verdict["verdict"] == "holds on this sample", verdict["text"]
    assert verdict["lies"] == 18


def test_dlgm_release_time_lies_do_not_pay_on_a_sample():
    jobs = _jobs(2, n=60, nodes=3)
    t = au.audit(jobs, "dlgm", {}, au.Deviation.parse("delay:10,100,1000"), per_band=3, seed=2)
    (_, delay) = au.claim_verdicts(t, get_mechanism("dlgm").claims)
    assert delay["verdict"] == "holds on this sample", delay["text"]
    assert t["gain"].min() < 0  # lies can cost: the check is not vacuous


def test_group_lies_change_only_the_group_and_sum_its_utility():
    """A group lie is the same paired rerun with several jobs' reports changed, its utilities the
    members' sums (checked against plain runs); the registry's claims are about one job's lies and
    get no verdict from a group audit."""
    jobs = _jobs(4, n=60, nodes=3)
    groups = au.group_draws(jobs, 0.5, 3, seed=1)
    assert [len(g) for g in groups] == [30, 30, 30] and not all(np.array_equal(groups[0], g) for g in groups[1:])
    assert all(np.array_equal(a, b) for a, b in zip(groups, au.group_draws(jobs, 0.5, 3, seed=1)))  # seeded
    t = au.audit(jobs, "hb", {"pricing": "first"}, au.Deviation.parse("value:0.5"), seed=1, group=0.5, group_draws_=3)
    assert list(t["who"]) == ["group"] * 3 and list(t["copies"]) == [30, 30, 30]
    for i, rows in enumerate(groups):  # the row is the members' summed true utility, from plain runs
        bid = jobs.true_value.copy()
        bid[rows] *= 0.5
        def u(b):
            r = run(prepare_jobs(jobs.workload, "bimodal", jobs.seed, bid=b), "hb", {"pricing": "first"}).records
            return float(np.sum(-jobs.true_value[rows] * (r.end_time[rows] - jobs.workload.submit_time[rows])
                                - r.payment[rows]))
        assert t["truthful"].iloc[i] == pytest.approx(u(jobs.true_value), rel=1e-12)
        assert t["deviating"].iloc[i] == pytest.approx(u(bid), rel=1e-12)
    from marketsched.mechanisms.registry import get

    (v,) = au.claim_verdicts(t, get("egg").claims)
    assert v["verdict"] == "not audited" and "groups lie together" in v["text"]
    with pytest.raises(ValueError, match="group share"):
        au.group_draws(jobs, 0.0, 3, seed=1)


def test_ees_delay_utility_counts_from_the_true_arrival():
    """Under EES (Mutz (2008), eqs. 4.5-4.6) a late arrival is judged by the true type: the value of
    running, w x the time from the true arrival to the deadline, and the waiting cost from the true
    arrival (the job waited, it just did not say so); checked against a plain run."""
    from marketsched.engine.records import FinalState

    jobs = Scenario(WorkloadSpec(synthetic_jobs=60, synthetic_nodes=4, seed=2), seed=2).build()
    job = 52
    t = au.audit(jobs, "ees", {"n_draws": 20}, au.Deviation.parse("delay:0,60"), job_ids=[job])
    row = int(np.flatnonzero(jobs.workload.job_id == job)[0])
    jobs2, (row2,) = au.deviate(jobs, np.array([row]), au.Deviation("delay", 60.0))
    r = run(jobs2, "ees", {"n_draws": 20}).records
    a, w, deadline = jobs.workload.submit_time[row], jobs.true_value[row], jobs.deadline[row]
    left = r.end_time[row2] if np.isnan(r.first_start[row2]) else r.first_start[row2]
    u = w * (deadline - a) * (r.state[row2] == FinalState.COMPLETED) - w * (left - a) - r.payment[row2]
    assert t["gain"].iloc[0] == 0.0
    assert t["deviating"].iloc[1] == pytest.approx(u, rel=1e-12)
    assert t["gain"].iloc[1] != 0.0  # the delay changed something: the comparison is not vacuous


def test_egg_delay_lies_do_not_pay_on_a_sample():
    """Kang & Parkes (2007), Theorem 1 covers a later arrival; Egg's value schedule at the true
    deadline does not depend on when the job says it arrived."""
    jobs = Scenario(WorkloadSpec(synthetic_jobs=200, synthetic_nodes=8, seed=0), seed=1).build()
    t = au.audit(jobs, "egg", {}, au.Deviation.parse("delay:60,600,3600"), job_ids=[76, 78, 99])
    (verdict,) = au.claim_verdicts(t, get_mechanism("egg").claims)
    assert verdict["verdict"] == "holds on this sample" and verdict["lies"] == 9, verdict["text"]
    assert t["gain"].min() < 0  # a late arrival can cost: the check is not vacuous


def test_delay_past_the_deadline_is_refused():
    jobs = _jobs(2, n=30, nodes=3)
    with pytest.raises(ValueError, match=r"a delay of 1e\+07 s makes job \d+ arrive at or after its deadline"):
        au.audit(jobs, "ees", {"n_draws": 5}, au.Deviation.parse("delay:10000000"), per_band=1)
