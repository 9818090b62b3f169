"""The day-ahead reservation auctions in the incentive audit (marketsched.analysis.reservations).

- DPGVA (Mutz (2008), section 5.1.3): Clarke payments on the optimal dynamic programme make the
  true (value, length, deadline) dominant for users who value only reservations meeting their
  true length and deadline; the audit of random small instances finds no lie that pays beyond
  float tolerance (not only those the thesis sweeps: any value, length or deadline, by the GVA
  argument), truthful utilities are never negative (ex-post individual rationality), and lies
  do cost somewhere (the check is not vacuous).
- A hand example (the DPGVA unit test's three bids) gives the audit's utilities exactly.
- Relaxed DPGVA (chapter 7) claims nothing; its deviating clearing uses the truthful one's
  random numbers, so a lie that changes nothing gains exactly 0.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from marketsched.analysis import audit as au
from marketsched.analysis import reservations as rv
from marketsched.cli import main
from marketsched.scenario import Jobs, Scenario, WorkloadSpec
from marketsched.workloads.workload import Workload

LIES = "value:0.3,0.8,1.25,3 estimate:0.5,1.5,3 deadline:0.3,0.7,1.5"


def _lies(text=LIES):
    return [d for part in text.split() for d in au.Deviation.parse(part)]


def _jobs(seed: int, n: int = 40):
    spec = WorkloadSpec(synthetic_jobs=n, synthetic_nodes=4, seed=seed, estimates="exact")
    return Scenario(spec, seed=seed, deadlines="patience").build()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_dpgva_no_lie_pays_and_truth_is_individually_rational(seed):
    jobs = _jobs(seed)
    params = {"horizon": 6 * 3600.0}  # 24 granules a period: several periods, each contested
    assert len(np.unique(rv.bids(jobs, rv.AUCTIONS["dpgva"].resolve(params)).period)) > 1
    t = rv.audit(jobs, "dpgva", params, _lies(), per_band=40, seed=seed)  # every job
    assert len(t) == 40 * 10
    assert not au.profitable(t).any(), t.loc[t["gain"].idxmax()]
    assert (t["truthful"] >= 0).all()
    assert t["gain"].min() < 0
    (v,) = au.claim_verdicts(t, rv.AUCTIONS["dpgva"].claims)
    assert v["verdict"] == "holds on this sample" and v["lies"] == 40 * 8, v["text"]


def _hand():
    """Mutz's three bids in granules of 900 s over 4 granules: A (l 2, d 2, v 5), B (l 2, d 4,
    v 4), C (l 3, d 4, v 6); A and B win and pay 2 and 1 (W(-A) = W(-B) = 6)."""
    runtime = np.array([1800.0, 1800.0, 2700.0])
    w = Workload.from_columns(submit_time=[0.0, 0.0, 0.0], runtime=runtime, capacity=1, runtime_estimate=runtime)
    value = np.array([5.0, 4.0, 6.0]) / runtime
    return Jobs(w, value, value.copy(), deadline=np.array([1800.0, 3600.0, 3600.0]))


def test_hand_example_utilities():
    jobs = _hand()
    params = {"horizon": 3600.0}
    t = rv.audit(jobs, "dpgva", params, _lies("value:2 deadline:0.5 estimate:0.5"), job_ids=[1, 2, 3])
    got = {(r.job_id, r.kind): (r.truthful, r.deviating) for r in t.itertuples()}
    assert got[(1, "value")] == pytest.approx((3.0, 3.0))     # A still wins, its price is not its bid
    assert got[(1, "deadline")] == pytest.approx((3.0, 0.0))  # 1 granule to its deadline: A cannot fit
    # 1 granule asked, 2 needed: A and C win (11), A pays W(-A) - (11 - 5) = 6 - 6 = 0 and gets nothing
    assert got[(1, "estimate")] == pytest.approx((3.0, 0.0))
    assert got[(3, "value")] == pytest.approx((0.0, -3.0))    # C (12) beats A + B (9), pays 9 for a value of 6
    assert got[(2, "value")] == pytest.approx((3.0, 3.0))


def test_relaxed_dpgva_is_paired_and_seeded():
    jobs = _jobs(5, n=30)
    params = {"horizon": 6 * 3600.0, "depth": 8}
    t = rv.audit(jobs, "relaxed-dpgva", params, _lies("value:1 deadline:1 estimate:0.5,2"), per_band=2, seed=1)
    assert (t.loc[t["kind"] != "estimate", "gain"] == 0.0).all()  # the same random numbers: no change, no gain
    again = rv.audit(jobs, "relaxed-dpgva", params, _lies("value:1 deadline:1 estimate:0.5,2"), per_band=2, seed=1)
    assert t.equals(again)
    assert rv.AUCTIONS["relaxed-dpgva"].claims == ()


def test_lies_outside_the_model_and_bad_input_are_named():
    jobs = _jobs(1, n=10)
    with pytest.raises(ValueError, match="dpgva takes sealed bids for a whole period: a delay lie"):
        rv.audit(jobs, "dpgva", {}, _lies("delay:60"))
    with pytest.raises(ValueError, match="no parameter 'depth'"):
        rv.audit(jobs, "dpgva", {"depth": 3}, _lies("value:2"))
    with pytest.raises(ValueError, match="unknown reservation auction 'vickrey'"):
        rv.audit(jobs, "vickrey", {}, _lies("value:2"))


def test_cli_audit_of_dpgva_prints_the_verdict(tmp_path):
    args = ["audit", "--mechanism", "dpgva", "--param", "horizon=21600", "--synthetic-jobs", "60", "--synthetic-nodes",
            "4", "--estimates", "exact", "--per-band", "3", "--deviate", "value:0.5,2", "--deviate", "deadline:0.5",  # 7 focal jobs
            "--deviate", "estimate:2", "--out", str(tmp_path)]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "no lie paid for any focal job" in text
    assert "-> holds on this sample: 0 of 28 lies paid" in text
    assert (tmp_path / "claims.csv").exists() and (tmp_path / "deadline.png").exists()
    bad = CliRunner().invoke(main, ["audit", "--mechanism", "dpgva", "--synthetic-jobs", "20", "--deviate", "node:2"])
    assert bad.exit_code != 0 and "a node lie is not in its model" in bad.output
