"""Reproduction of Stößer (2009), chapter 6: Proportional Share vs Sanghavi-Hajek, reservations, bidders.

Source: Stößer's thesis, sections 6.3.3 (Table 6.1), 6.4 (Tables 6.2-6.6, Figures 6.1 and 6.3),
6.5.3 (reservation example) and appendix D (Tables D.1-D.3).

What is run
-----------
1. **Two users** (Table 6.1, Theorems 1-2): the closed-form equilibria through the general rules.
2. **Reservations** (section 6.5.3): the worked example with exact SH shares.
3. **Agent-based comparison** (section 6.4): the first 1,000 requests of the substitute trace
   (KTH-SP2 for DAS2-fs0, see ``shared/data/traces/README.md``), requests wider than 10 CPUs
   dropped after taking the first 1,000 (the thesis's order of steps), ``C = 10`` CPUs, one
   bidding round per active second. Valuations per CPU and second uniform on ``{10..60}``
   (narrow) or ``{10..160}`` (wide), one draw per workload and distribution (30 workloads).
   ZIC and Q-learning (alpha = 0.3, gamma = 0.3, epsilon = 0.05) bidders, PS and SH. Tables 6.4
   (mean utility per request), 6.5 (revenue, SH/PS, two-tailed sign test over the 30 paired
   workloads), 6.6 (efficiency ratio against the per-second fractional optimum).
4. **Parameter grid** (Table 6.3, appendix D): 36 combinations x 10 runs, wide valuations, PS:
   Spearman correlation of the mean percentage bid with the requested CPUs over 20-second
   windows (D.1), mean utility per request (D.2), coefficient of variation of revenue (D.3).

Decisions (beyond those of ``mechanisms/online/share.py`` and ``behaviour/learning.py``)
----------------------------------------------------------------------------------------
* **Common random numbers**: a workload's valuations are drawn once and used by every strategy
  and rule; a run's bidder stream is shared by PS and SH. With ZIC the two rules therefore see
  identical bids and earn identical revenue; the thesis's check (independent draws, revenue
  equal up to noise) is run as well, with an independent stream for SH ("ZIC, independent").
* **The 10 runs of the grid** differ in the bidders' random seeds only, on one valuation draw
  (workload 0, wide): the thesis's CVs of 0.3%-6.5% are far below the CV that redrawing the
  valuations alone causes on this trace (the report computes it from the Q-learning runs), so its
  runs cannot have redrawn them.
* **Mean utility per request** is over the requests that bid at least once (all of them in the
  full run; a quick run cuts the rounds).
* The batches run on local processes (2 by default), each batch a vectorised loop over all its
  runs (:func:`marketsched.mechanisms.online.share.simulate`).
* **Added** (ours): the Q-learning runs repeated with the rule applied to the per-CPU bids
  (``basis="per_cpu"``, strategy ``q-per-cpu``) on every workload, to measure how much that open
  point moves efficiency and revenue.

:func:`run` stores the per-run rows, the bid/demand window series and the workload statistics in
``OUT/results`` (``runs.csv``, ``series.csv.gz``, ``demand.csv``, ``meta.json``); :func:`write_report`
reads only those (the two-user and reservation results are exact and recomputed).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from marketsched.behaviour.learning import CHOSEN, VALUE_RANGES, ZIC, QLearning, parameter_grid
from marketsched.experiments.report import Report
from marketsched.experiments.tasks import Task, run_tasks
from marketsched.mechanisms.online import share as sm

NAME = "stoesser-ch6"
TITLE = "Stößer (2009) ch. 6: Proportional Share vs Sanghavi-Hajek, reservations, ZIC and Q-learning bidders"
QUICK_TIME = "~10 s"  # CPU time of --quick (user + system, all processes), measured

TRACE = "KTH-SP2-1996-2.1-cln"  # substitute for DAS2-fs0 (shared/data/traces/README.md)
N_REQUESTS = 1000
CAPACITY = 10
#: Second pool size: the substitute trace on 40 CPUs is about as congested as DAS2-fs0 on 10
#: (demand above supply in a few per cent of the busy seconds, peaks of a few times the supply).
SENSITIVITY_CAPACITY = 40
WINDOW = 20
SEED = 6001  # Stößer (2009), chapter 6
DISTS = {"narrow": 0, "wide": 1}

# ---------------------------------------------------------------------------- the thesis's numbers
THESIS_6_1 = {  # Table 6.1 (v_L = 2.1, v_H = 5)
    "ps": {"bids": (0.437, 1.041), "shares": (0.296, 0.704), "unit_prices": (1.478, 1.478),
           "utilities": (0.185, 2.479), "revenue": 1.478, "efficiency": 4.142, "ratio": 0.8284},
    "sh": {"bids": (0.441, 1.05), "shares": (0.21, 0.79), "unit_prices": (2.1, 1.329),
           "utilities": (0.0, 2.9), "revenue": 1.491, "efficiency": 4.391, "ratio": 0.8782},
}
THESIS_6_2 = {"cpu": (2, 8, 2.08, 2), "runtime": (2, 38768, 1044.06, 38), "requests": 984}
THESIS_6_4 = {("zic", "narrow"): (7615, 6404), ("zic", "wide"): (22226, 19310),
              ("q", "narrow"): (30406, 28245), ("q", "wide"): (75503, 70635)}
THESIS_6_5 = {("zic", "narrow"): (38996633, 38999034), ("zic", "wide"): (90435690, 90435073),
              ("q", "narrow"): (16077240, 17147600), ("q", "wide"): (36146847, 38270621)}
THESIS_6_6 = {"narrow": (0.829, 0.809), "wide": (0.819, 0.799)}
# Tables D.1-D.3 in the order of parameter_grid(): alpha, then gamma, then epsilon
THESIS_D1 = [0.799, 0.766, 0.733, 0.781, 0.771, 0.74, 0.751, 0.753, 0.743,
             0.808, 0.752, 0.725, 0.807, 0.752, 0.727, 0.797, 0.76, 0.734,
             0.796, 0.747, 0.723, 0.795, 0.747, 0.726, 0.785, 0.752, 0.731,
             0.774, 0.735, 0.715, 0.771, 0.74, 0.721, 0.773, 0.745, 0.732]
THESIS_D2 = [67395, 61408, 55394, 61447, 57152, 52950, 52982, 50214, 47098,
             69055, 62598, 55237, 65544, 59803, 53877, 57546, 55257, 50807,
             67525, 60471, 53716, 63810, 58650, 52427, 59037, 55251, 50019,
             65265, 58451, 51804, 61622, 56598, 50639, 58203, 54055, 48484]
THESIS_D3 = [0.029, 0.012, 0.005, 0.065, 0.02, 0.005, 0.062, 0.015, 0.011,
             0.013, 0.005, 0.003, 0.035, 0.007, 0.005, 0.03, 0.01, 0.005,
             0.01, 0.004, 0.004, 0.025, 0.006, 0.004, 0.032, 0.009, 0.005,
             0.016, 0.006, 0.003, 0.04, 0.009, 0.004, 0.022, 0.008, 0.004]


# ---------------------------------------------------------------------------- workload
def build_plan(trace: str = TRACE, n_requests: int = N_REQUESTS, capacity: int = CAPACITY):
    """The request set of section 6.4.1 from an SWF trace; returns ``(plan, notes)``.

    Steps: clean the log (:func:`~marketsched.workloads.to_workload`: cancelled entries and
    entries without processors dropped, counted), keep the first ``n_requests`` in submit order,
    then drop those wider than ``capacity`` CPUs (counted), and build the
    :class:`~marketsched.mechanisms.online.share.MarketPlan`.
    """
    from marketsched.workloads import first_jobs, load_trace, to_workload

    log = load_trace(trace)
    w, report = to_workload(log)
    head = first_jobs(w, n_requests)
    fits = head.procs <= capacity
    if not fits.any():
        raise ValueError(f"build_plan: none of the first {n_requests} requests of {trace} fits on {capacity} CPUs")
    plan = sm.MarketPlan.from_arrays(head.submit_time[fits], head.runtime[fits], head.procs[fits], name=trace)
    notes = {"trace": trace, "cleaning": str(report), "first": len(head), "too_wide": int((~fits).sum()),
             "requests": len(plan)}
    return plan, notes


def draw_values(n: int, dist: str, workload: int) -> np.ndarray:
    """Valuations per CPU and second of one workload: uniform on the integers of ``dist``."""
    low, high = VALUE_RANGES[dist]
    rng = np.random.default_rng([SEED, DISTS[dist], int(workload)])
    return rng.integers(low, high + 1, n).astype(np.float64)


# ---------------------------------------------------------------------------- one batch (worker)
def run_batch(job: dict) -> dict:
    """Run one batch of runs over the same plan; returns per-run metrics and window series.

    ``job``: ``plan``, ``kind`` ("zic" or "q"), ``rows`` (dicts with ``dist``, ``workload``,
    ``rule``, ``seed`` and, for Q-learning, ``alpha``, ``gamma``, ``epsilon``), ``id``,
    ``series_of`` (row keys whose mean percentage-bid series to keep).
    """
    plan = job["plan"]
    rows = job["rows"]
    values = np.stack([draw_values(len(plan), r["dist"], r["workload"]) for r in rows])
    seeds = [np.random.SeedSequence(r["seed"]) for r in rows]
    bidder: ZIC | QLearning
    if job["kind"] == "zic":
        bidder = ZIC()
    else:
        bidder = QLearning(
            alpha=[r["alpha"] for r in rows], gamma=[r["gamma"] for r in rows], epsilon=[r["epsilon"] for r in rows],
            low=[VALUE_RANGES[r["dist"]][0] for r in rows], high=[VALUE_RANGES[r["dist"]][1] for r in rows],
        )
    t0 = time.perf_counter()
    res = sm.simulate(plan, values, [r["rule"] for r in rows], bidder, capacity=job.get("capacity", CAPACITY), seeds=seeds,
                      basis=job.get("basis", "total"), window=WINDOW)
    seconds = time.perf_counter() - t0
    active = plan.active_rows()
    util = res.utility[:, active].mean(axis=1)
    rho = res.spearman()
    out = []
    for i, r in enumerate(rows):
        row = {k: v for k, v in r.items() if k != "seed"}
        row.update(revenue=float(res.revenue[i]), mean_utility=float(util[i]), efficiency=float(res.efficiency[i]),
                   welfare=float(res.welfare[i]), optimum=float(res.optimum[i]), spearman=float(rho[i]),
                   mean_pct_bid=float(res.win_pct[i].sum() / res.win_reqsec.sum()))
        out.append(row)
    pct, dem = res.window_series()
    series = {}
    for key in job.get("series_of", []):
        pick = [i for i, r in enumerate(rows) if _key(r) == key]
        if pick:
            series[key] = pct[pick].mean(axis=0)
    return {"id": job["id"], "rows": out, "series": series, "demand": dem, "seconds": seconds, "runs": len(rows),
            "rounds": res.rounds}


def _key(r: dict) -> tuple:
    return (r.get("capacity", CAPACITY), r["strategy"], r["dist"], r["rule"], r.get("alpha"), r.get("gamma"),
            r.get("epsilon"))


# ---------------------------------------------------------------------------- the grid of jobs
def make_jobs(plan, n_workloads: int, grid_runs: int, grid: list[dict], capacity: int = CAPACITY) -> list[dict]:
    """The batches for one pool size: ZIC (all settings); Q-learning on total bids (both distributions and the
    grid: a batch's time is mostly the per-second loop, so one large batch costs little more than a small
    one); Q-learning on per-CPU bids (both distributions). A run's results do not depend on its batch."""
    jobs: list[dict[str, Any]] = []
    zic = []
    for dist in DISTS:
        for w in range(n_workloads):
            base = [SEED, DISTS[dist], w, 0]
            zic.append({"strategy": "zic", "dist": dist, "workload": w, "rule": "ps", "seed": base})
            zic.append({"strategy": "zic", "dist": dist, "workload": w, "rule": "sh", "seed": base})
            zic.append({"strategy": "zic-independent", "dist": dist, "workload": w, "rule": "sh", "seed": base + [1]})
    jobs.append({"id": "ZIC", "kind": "zic", "rows": zic})
    q: list[dict[str, Any]] = []
    for dist in DISTS:
        for w in range(n_workloads):
            for rule in ("ps", "sh"):
                q.append({"strategy": "q", "dist": dist, "workload": w, "rule": rule, "seed": [SEED, DISTS[dist], w, 1],
                          **CHOSEN})
    grid_rows = [{"strategy": "grid", "dist": "wide", "workload": 0, "rule": "ps", "run": r,
                  "seed": [SEED, DISTS["wide"], 0, 2, r], **p} for p in grid for r in range(grid_runs)]
    jobs.append({"id": "Q-learning and grid", "kind": "q", "rows": q + grid_rows,
                 "series_of": [(capacity, "q", dist, rule, CHOSEN["alpha"], CHOSEN["gamma"], CHOSEN["epsilon"])
                               for dist in DISTS for rule in ("ps", "sh")]})
    jobs.append({"id": "Q-learning per-CPU bids", "kind": "q", "basis": "per_cpu",
                 "rows": [dict(r, strategy="q-per-cpu") for r in q]})
    for j in jobs:
        j["plan"] = plan
        j["capacity"] = capacity
        j["id"] = f"{j['id']} (C={capacity})"
        for r in j["rows"]:
            r["capacity"] = capacity
    return jobs


# ---------------------------------------------------------------------------- statistics
def sign_test(diff: np.ndarray) -> float:
    """Two-tailed sign test p-value for paired differences (zeros dropped)."""
    from scipy.stats import binomtest

    d = np.asarray(diff)
    d = d[d != 0]
    if len(d) == 0:
        return 1.0
    return float(binomtest(int((d > 0).sum()), len(d), 0.5, alternative="two-sided").pvalue)


def stars(p: float) -> str:
    return "***" if p < 0.01 else "**" if p < 0.05 else "*" if p < 0.1 else ""


def paired(df: pd.DataFrame, strategy: str, dist: str, metric: str, sh_strategy: str | None = None):
    a = df[(df.strategy == strategy) & (df.dist == dist) & (df.rule == "ps")].sort_values("workload")
    b = df[(df.strategy == (sh_strategy or strategy)) & (df.dist == dist) & (df.rule == "sh")].sort_values("workload")
    x, y = a[metric].to_numpy(), b[metric].to_numpy()
    return x, y, sign_test(y - x)


# ---------------------------------------------------------------------------- report pieces
def two_user_section(rep: Report, c) -> None:
    from marketsched.analysis import verdicts as V

    rep.heading("Two users (section 6.3, Table 6.1)")
    rows: list[tuple[str, str, float, str]] = []
    printed: dict[str, dict[str, Any]] = {"ps": {"bids": ("0.437", "1.041"), "shares": ("0.296", "0.704"), "unit_prices": ("1.478", "1.478"),
                      "utilities": ("0.185", "2.479"), "revenue": "1.478", "efficiency": "4.142", "ratio": "0.8284"},
               "sh": {"bids": ("0.441", "1.05"), "shares": ("0.21", "0.79"), "unit_prices": ("2.1", "1.329"),
                      "utilities": ("0", "2.9"), "revenue": "1.491", "efficiency": "4.391", "ratio": "0.8782"}}
    for rule, label in (("ps", "Proportional Share"), ("sh", "Sanghavi-Hajek")):
        out = sm.two_user_equilibrium(2.1, 5.0, rule)
        t = printed[rule]
        for key in ("bids", "shares", "unit_prices", "utilities"):
            for i, who in enumerate(("L", "H")):
                name = {"bids": "bid", "shares": "share", "unit_prices": "unit price", "utilities": "utility"}[key]
                rows.append((label, f"{name} {who}", float(getattr(out, key)[i]), str(t[key][i])))
        for key in ("revenue", "efficiency", "ratio"):
            rows.append((label, key, float(getattr(out, key)), str(t[key])))
    for label, q, ours, th in rows:
        c.check("Table 6.1", f"{label}: {q} (v_L = 2.1, v_H = 5)", th, V.value(th), V.exact(ours), fmt=".5g")
    ps, sh = (sm.two_user_equilibrium(2.1, 5.0, rule) for rule in ("ps", "sh"))
    c.check("Sec. 6.3.3", "switching to SH raises the overall utility by about 6% (4.142 to 4.391)", "~6%",
            V.verbal("about", 0.06), V.exact(sh.efficiency / ps.efficiency - 1), fmt=".4f")
    _two_user_theorems(c)
    rep.text(
        "The equilibria are computed exactly through the general allocation rules; every entry of Table 6.1 is a "
        "claim below. Four Proportional Share entries differ in the last printed digit because the thesis computed "
        "them from its rounded intermediates: revenue and unit price 1.4789 are printed as 1.478 (0.437 + 1.041), "
        "u_L = 0.1837 as 0.185 (2.1 x 0.296 - 0.437), u_H = 2.4797 as 2.479 (5 x 0.704 - 1.041) and the ratio "
        "82.845% as 82.84% (4.142 / 5); `tests/test_share.py` checks both the exact values and this arithmetic. "
        "Theorems 1 and 2 and the two equilibria are property tests over random value pairs."
    )
    import matplotlib.pyplot as plt

    r = np.linspace(0.01, 1.0, 400)
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].plot(r, r / (1 + r), label="PS")
    ax[0].plot(r, (r**2 + r) / 2, label="SH")
    ax[0].axvline(math.sqrt(2) - 1, color="grey", ls=":", label=r"$\sqrt{2}-1$ (Theorem 1)")
    ax[0].set_xlabel("v_l / v_h")
    ax[0].set_ylabel("revenue / v_h")
    ax[0].legend()
    ax[1].plot(r, (r**2 + 1) / (r + 1), label="PS")
    ax[1].plot(r, (r**2 + 2 - r) / 2, label="SH")
    ax[1].axhline(0.875, color="C1", ls=":", lw=0.8)
    ax[1].axhline(2 * math.sqrt(2) - 2, color="C0", ls=":", lw=0.8)
    ax[1].plot([0.42], [4.142 / 5], "o", color="C0")
    ax[1].plot([0.42], [4.391 / 5], "o", color="C1")
    ax[1].set_xlabel("v_l / v_h")
    ax[1].set_ylabel("efficiency ratio")
    ax[1].legend()
    rep.figure(fig, "two_users", "Two-user equilibria: revenue (left) and efficiency ratio (right) against v_l/v_h; "
               "dots: Table 6.1; dotted: the worst cases 87.5% (SH) and 82.84% (PS)")


def _two_user_theorems(c) -> None:
    """Lemma 1, Theorems 1 and 2 of Stößer (2009), sec. 6.3, claims for every pair ``0 < v_l <= v_h``, checked
    on a fixed grid (``v_h`` in 1, 5, 60; 100 ratios ``v_l / v_h`` in [0.01, 1], none within 1e-6 of
    sqrt 2 - 1): each is *not refuted* over the grid or *differs* with its counterexamples' share.

    1. Lemma 1: in the SH equilibrium user l bids no more than user h, and each bid is a best response
       (:func:`~marketsched.mechanisms.online.share.best_response`, utility within 1e-9 relative);
    2. Theorem 1: SH earns more revenue than PS iff ``v_l > (sqrt 2 - 1) v_h``;
    3. Theorem 2: SH's efficiency is at least PS's (1e-12 relative for rounding).
    """
    from marketsched.analysis import verdicts as V

    pairs = [(r * vh, vh) for vh in (1.0, 5.0, 60.0) for r in np.linspace(0.01, 1.0, 100)
             if abs(r - (math.sqrt(2) - 1)) > 1e-6]
    bad = {"lemma": 0, "thm1": 0, "thm2": 0}
    for vl, vh in pairs:
        sh, ps = sm.two_user_equilibrium(vl, vh, "sh"), sm.two_user_equilibrium(vl, vh, "ps")
        best = [sm.best_response(v, [sh.bids[1 - i]], "sh")[1] for i, v in enumerate((vl, vh))]
        bad["lemma"] += not (sh.bids[0] <= sh.bids[1]
                             and all(u >= b - 1e-9 * max(1.0, abs(b)) for u, b in zip(sh.utilities, best)))
        bad["thm1"] += (sh.revenue > ps.revenue) != (vl > (math.sqrt(2) - 1) * vh)
        bad["thm2"] += sh.efficiency < ps.efficiency * (1 - 1e-12)
    n = len(pairs)
    for key, where, claim in (("lemma", "Sec. 6.3, Lemma 1", "SH equilibrium: user l bids no more than user h"),
                              ("thm1", "Sec. 6.3, Thm 1", "SH earns more revenue than PS iff v_l > (sqrt 2 - 1) v_h"),
                              ("thm2", "Sec. 6.3, Thm 2", "SH's efficiency is at least PS's, for all (v_l, v_h)")):
        c.check(where, claim, "for all pairs", V.value(0.0, exact=True), V.exact(bad[key] / n), fmt=".3g",
                instances=n, note=f"share of counterexamples over a grid of {n} value pairs (equilibria through the "
                                  "general allocation rules)")


def reservation_section(rep: Report, c) -> None:
    from marketsched.analysis import verdicts as V

    rep.heading("Reservations (section 6.5.3)")
    a = sm.reservation_round([10.0, 20.0], [0.4, 0.3])
    b = sm.reservation_round([10.0, 20.0, 30.0], [0.4, 0.3])
    rep.text(
        f"RES 70%, SH bids 10 and 20: SH shares {', '.join(f'{x:.4f}' for x in a.sh_shares)}, maximum unit price "
        f"{a.unit_price:.2f}, revenue {a.revenue:.2f}. With a third SH bid of 30: shares "
        f"{', '.join(f'{x:.4f}' for x in b.sh_shares)}, price {b.unit_price:.2f}, revenue {b.revenue:.2f}. "
        "Exact SH shares of the second scenario are 0.3 x (7/54, 16/54, 31/54); the maximum unit price is "
        "10 / (0.3 x 7/54) = 257.14 and revenue 60 + 0.7 x 257.14 = 240.00. The thesis rounded the low "
        "bidder's share to 3.9%, which gives its 256.41 and 239.49 (a rounding erratum in the thesis's "
        "section 6.5.3)."
    )
    c.check("Sec. 6.5.3", "RES 70%, SH bids 10 and 20: share of the high bidder", "22.5%", V.value("22.5"),
            V.exact(100 * a.sh_shares[1]), fmt=".4g")
    c.check("Sec. 6.5.3", "RES 70%, SH bids 10 and 20: maximum unit price", "133.33", V.value("133.33"),
            V.exact(a.unit_price), fmt=".5g")
    c.check("Sec. 6.5.3", "RES 70%, SH bids 10 and 20: revenue", "123.33", V.value("123.33"), V.exact(a.revenue),
            fmt=".5g")
    c.check("Sec. 6.5.3", "+ SH bid 30: maximum unit price", "256.41", V.value("256.41"), V.exact(b.unit_price),
            fmt=".5g", note="the thesis rounded a share to 3.9% (erratum)")
    c.check("Sec. 6.5.3", "+ SH bid 30: revenue", "239.49", V.value("239.49"), V.exact(b.revenue), fmt=".5g",
            note="the thesis rounded a share to 3.9% (erratum)")


def workload_section(rep: Report, meta: dict, demand: pd.DataFrame, c) -> None:
    """The workload against Table 6.2; its rows go to ``c``, a list of settings (inputs, not claims)."""
    rep.heading("Workload (Table 6.2, Figure 6.1)")
    w = meta["workload"]
    df = pd.DataFrame([{"attribute": k, **w[k], "thesis (DAS2-fs0)": th} for k, th in
                       (("CPU", "2 / 8 / 2.08 / 2"), ("runtime (s)", "2 / 38,768 / 1,044.06 / 38"))])
    rep.table(df, caption=f"Requests of {meta['notes']['trace']} (substitute for DAS2-fs0): min / max / mean / median",
              floatfmt=".6g")
    notes = meta["notes"]
    rep.text(
        f"First {notes['first']:,} requests of {notes['trace']}, {notes['too_wide']} wider than {CAPACITY} CPUs "
        f"dropped (the thesis dropped 16 of DAS2-fs0's): **{notes['requests']} requests**, "
        f"**{w['rounds']:,} bidding rounds** (seconds with at least one request; the thesis: \"more than 400,000\"). "
        f"Mean demand {w['demand_mean']:.1f} CPUs, peak {w['demand_peak']:.0f}. On C = {CAPACITY} CPUs demand exceeds "
        f"supply in {100 * w['above'][str(CAPACITY)]:.0f}% of the busy seconds (peak {w['demand_peak'] / CAPACITY:.1f}x "
        f"supply); on C = {SENSITIVITY_CAPACITY} in {100 * w['above'][str(SENSITIVITY_CAPACITY)]:.0f}% "
        f"(peak {w['demand_peak'] / SENSITIVITY_CAPACITY:.1f}x). The thesis's DAS2-fs0 on 10 CPUs has demand \"frequently "
        "below supply\" with peaks up to 6x: KTH-SP2's requests are wider and longer, so C = 10 is far more congested "
        f"than the thesis's market and C = {SENSITIVITY_CAPACITY} is the closer match; "
        + ("everything is run on both. " if SENSITIVITY_CAPACITY in meta.get("capacities", [SENSITIVITY_CAPACITY]) else
           f"this run has C = {CAPACITY} only. ")
        + "Money amounts are larger than the thesis's either way; the claims judge ratios, signs and rankings, and "
        "list the levels as not attempted."
    )
    for what, printed in (("requests after the > 10-CPU filter", "984"), ("CPU per request: min / max / mean / median",
                                                                           "2 / 8 / 2.08 / 2"),
                          ("runtime per request (s): min / max / mean / median", "2 / 38,768 / 1,044.06 / 38"),
                          ("bidding rounds", "> 400,000")):
        c.not_attempted("Table 6.2, Sec. 6.4", what, printed, "DAS2-fs0 not available; the substitute's figures are above")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3))
    ax.plot(demand.day, demand.mean_busy_demand, lw=0.7)
    ax.axhline(CAPACITY, color="red", ls="--", lw=0.8, label=f"C = {CAPACITY}")
    ax.axhline(SENSITIVITY_CAPACITY, color="purple", ls=":", lw=0.8, label=f"C = {SENSITIVITY_CAPACITY}")
    ax.set_xlabel("day")
    ax.set_ylabel("requested CPUs")
    ax.legend()
    rep.figure(fig, "workload", "Requested CPUs over time (means over 500-second intervals, busy seconds only; cf. Figure 6.1)")


def _table(df, strategy, label, metric, thesis, fmt=lambda x: x, sh_strategy=None):
    rows = []
    for dist in DISTS:
        x, y, p = paired(df, strategy, dist, metric, sh_strategy)
        if len(x) == 0:
            continue
        tp, ts = thesis[dist] if isinstance(thesis, dict) and dist in thesis else thesis[(strategy, dist)]
        rows.append({"strategy": label, "valuations": f"{dist} {VALUE_RANGES[dist]}", "PS": fmt(x.mean()),
                     "SH": fmt(y.mean()), "SH/PS": f"{y.mean() / x.mean():.3f}{stars(p)}", "sign test p": p,
                     "SH > PS (runs)": f"{int((y > x).sum())}/{len(x)}",
                     "thesis PS": tp, "thesis SH": ts, "thesis SH/PS": f"{ts / tp:.3f}"})
    return rows


def results_section(rep: Report, df: pd.DataFrame, meta: dict, capacity: int) -> None:
    n_workloads = meta["n_workloads"]
    main = df[df.strategy.isin(["zic", "q", "zic-independent"]) & (df.capacity == capacity)]
    if main.empty:
        return
    rep.heading(f"Utility, revenue and efficiency (Tables 6.4-6.6), C = {capacity}")
    t64 = _table(main, "zic", "ZIC", "mean_utility", THESIS_6_4) + _table(main, "q", "Q-learning", "mean_utility", THESIS_6_4)
    rep.table(pd.DataFrame(t64), caption=f"Table 6.4: mean utility per request (means over {n_workloads} workloads)", floatfmt=".4g")
    t65 = (_table(main, "zic", "ZIC (common draws)", "revenue", THESIS_6_5)
           + [dict(r, strategy="ZIC (independent draws)") for r in
              _table(main, "zic", "ZIC", "revenue", THESIS_6_5, sh_strategy="zic-independent")]
           + _table(main, "q", "Q-learning", "revenue", THESIS_6_5))
    rep.table(pd.DataFrame(t65), caption="Table 6.5: mean revenue; *** p < 0.01, two-tailed sign test over paired workloads",
              floatfmt=".4g")
    t66 = _table(main, "q", "Q-learning", "efficiency", {d: THESIS_6_6[d] for d in DISTS})
    t66 += [dict(r, strategy="ZIC") for r in _table(main, "zic", "ZIC", "efficiency", {d: (math.nan, math.nan) for d in DISTS})]
    rep.table(pd.DataFrame(t66), caption="Table 6.6: mean efficiency ratio (welfare / per-second fractional optimum); "
              "ZIC rows have no thesis value", floatfmt=".4g")
    q = main[main.strategy == "q"]
    rho = q.groupby(["dist", "rule"]).spearman.agg(["mean", "min", "max"]).reset_index()
    rep.table(rho, caption="Spearman correlation of mean percentage bid and requested CPUs (20-second windows), "
              "Q-learning runs of the tables above (the thesis: 0.808 for PS, wide)", floatfmt=".3f")
    # ZIC sanity formula
    zic = main[(main.strategy == "zic") & (main.rule == "ps")]
    if zic.empty:
        return
    expected = {d: meta["zic"][d]["expected"] for d in DISTS}
    rep.text(
        "**ZIC sanity check.** With common draws both rules see the same bids, so revenue is identical by "
        "construction (SH/PS = 1.000 exactly). With an independent stream for SH the revenue ratio is "
        + ", ".join(f"{d}: {r['SH/PS']} (p = {r['sign test p']:.2f})" for d, r in zip(DISTS, t65[len(DISTS):2 * len(DISTS)]))
        + "; the thesis reports 1.000 for both. Expected ZIC revenue given the valuations, "
        "sum over request-seconds of c_j (v_j + 1) / 2: "
        + ", ".join(f"{d} {expected[d]:,.0f} vs measured {zic[zic.dist == d].revenue.mean():,.0f}" for d in DISTS)
        + (". The thesis's back-of-envelope version (mean bid x mean CPUs x mean runtime x requests) gives "
           + ", ".join(f"{d} {meta['zic'][d]['formula']:,.0f}" for d in DISTS) + " here."
           if not meta["truncated"] else " (rounds cut: the thesis's back-of-envelope formula does not apply).")
    )


def grid_section(rep: Report, df: pd.DataFrame, runs: int, capacity: int) -> dict:
    """Tables D.1-D.3 next to ours for one pool size; returns the rank agreements."""
    g = df[(df.strategy == "grid") & (df.capacity == capacity)]
    if g.empty:
        return {}
    rep.heading(f"Q-learning parameter grid (Table 6.3, appendix D.2-D.4), C = {capacity}")
    rows = []
    for i, p in enumerate(parameter_grid()):
        cell = g[(g.alpha == p["alpha"]) & (g.gamma == p["gamma"]) & (g.epsilon == p["epsilon"])]
        if cell.empty:
            continue
        rev = cell.revenue.to_numpy()
        rows.append({**p, "Spearman": cell.spearman.mean(), "D.1": THESIS_D1[i], "utility": cell.mean_utility.mean(),
                     "D.2": THESIS_D2[i], "CV revenue": rev.std(ddof=1) / rev.mean() if len(rev) > 1 else math.nan,
                     "D.3": THESIS_D3[i]})
    t = pd.DataFrame(rows)
    rep.table(t, caption=f"Wide valuations, PS, {runs} runs per cell (bidder seeds; one valuation draw): ours next to "
              "Tables D.1 (Spearman), D.2 (mean utility per request) and D.3 (CV of revenue)", floatfmt=".4g")
    from scipy.stats import spearmanr

    agree = {}
    if len(t) >= 4:
        agree = {c: spearmanr(t[c], t[d]).statistic for c, d in (("Spearman", "D.1"), ("utility", "D.2"), ("CV revenue", "D.3"))}
        params = t[["alpha", "gamma", "epsilon"]].to_numpy()  # row of the best (first on ties, NaN skipped)
        best = {c: params[np.nanargmax(t[c]) if c != "CV revenue" else np.nanargmin(t[c])].tolist()
                for c in ("Spearman", "utility", "CV revenue")}
        rep.text(
            f"Rank agreement between our {len(t)} cells and the thesis's (Spearman over cells): "
            + ", ".join(f"{c} {v:+.2f}" for c, v in agree.items())
            + ". Best cell (alpha, gamma, epsilon): "
            + ", ".join(f"{c} {tuple(v)}" for c, v in best.items())
            + "; the thesis chose (0.3, 0.3, 0.05), best on correlation and utility."
        )
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 3, figsize=(12, 3.6))
        for a, (c, d) in zip(ax, (("Spearman", "D.1"), ("utility", "D.2"), ("CV revenue", "D.3"))):
            sc = a.scatter(t[d], t[c], c=t["epsilon"], cmap="viridis", s=18)
            a.set_xlabel(f"thesis ({d})")
            a.set_ylabel(f"ours ({c})")
        fig.colorbar(sc, ax=ax[-1], label="epsilon")
        rep.figure(fig, f"grid_c{capacity}", f"Parameter grid, C = {capacity}: our cells against the thesis's "
                   "(colour: epsilon)")
    return agree


def bids_figure(rep: Report, series: pd.DataFrame, capacities) -> None:
    import matplotlib.pyplot as plt

    keys = [f"{c}|wide|ps" for c in capacities if f"{c}|wide|ps" in series]
    if "demand" not in series or not keys:
        return
    dem = series["demand"].to_numpy()
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 3.2 * len(keys)), squeeze=False)
    x = np.arange(len(dem))
    for ax, key in zip(axes[:, 0], keys):
        cap = int(key.split("|")[0])
        ax.semilogy(x, dem, lw=0.5, label="requested CPUs (20-s mean)")
        ax.semilogy(x, 100 * series[key].to_numpy(), lw=0.5, label="mean percentage bid, %")
        ax.axhline(cap, color="red", ls="--", lw=0.6, label=f"C = {cap}")
        ax.set_title(f"Q-learning, PS, wide, C = {cap} (mean over runs)", fontsize=9)
        ax.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("20-second window with requests")
    rep.figure(fig, "bids_vs_demand", "Mean percentage bid and demand per 20-second window, log scale (cf. Figure 6.3; "
               "means over runs, no bands)")


# ---------------------------------------------------------------------------- entry point
def run(out_dir, quick: bool = False, seeds: int | None = None, workers: int | None = None,
        executor: str = "process", capacities: tuple[int, ...] = (CAPACITY, SENSITIVITY_CAPACITY)) -> Path:
    """Run every batch (resuming from ``out_dir/tasks``), store the results in ``out_dir/results``, write the
    report from them.

    Full run: 30 workloads per valuation distribution, the full 36-cell grid with 10 runs.
    ``quick``: 3 workloads, the first 20,000 rounds only, 4 grid cells x 2 runs. ``seeds``
    overrides the number of workloads (and caps the grid's runs at 10). ``capacities``: the pool sizes
    run (the thesis's C = 10 first; the report judges the thesis's claims at C = 10 only).
    """
    import json

    t_start = time.perf_counter()
    out = Path(out_dir)
    plan, notes = build_plan()
    full_rounds = plan.rounds
    n_workloads = seeds or (3 if quick else 30)
    grid_runs = min(10, n_workloads) if not quick else 2
    grid = parameter_grid()
    if quick:
        plan = plan.truncated(20_000)
        grid = [p for p in grid if p["gamma"] == 0.3 and p["alpha"] in (0.1, 0.3) and p["epsilon"] in (0.05, 0.25)]
    if CAPACITY not in capacities or not set(capacities) <= {CAPACITY, SENSITIVITY_CAPACITY}:
        raise ValueError(f"stoesser-ch6: capacities must include {CAPACITY} and be among {CAPACITY}, "
                         f"{SENSITIVITY_CAPACITY}; got {capacities}")
    capacities = tuple(sorted(capacities))
    jobs = [j for c in capacities for j in make_jobs(plan, n_workloads, grid_runs, grid, capacity=c)]
    # the thesis's pool size first, long batches first within it
    jobs.sort(key=lambda j: (j["capacity"], -len(j["rows"]) * (1 if j["kind"] == "q" else 0.1)))
    workers = workers or min(2, os.cpu_count() or 1)
    # a batch's key: its name and what sets its size (rounds, workloads, grid runs and cells)
    tasks = [Task((j["id"], plan.rounds, n_workloads, grid_runs, len(grid)), run_batch, (j,)) for j in jobs]
    results = run_tasks(tasks, out / "tasks", executor, workers, description="stoesser-ch6 batches").values()
    res = out / "results"
    res.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([row for r in results for row in r["rows"]]).to_csv(res / "runs.csv", index=False)
    dem = next((r["demand"] for r in results if len(r["demand"])), np.array([]))
    series = {"demand": dem}
    for r in results:
        for key, v in r["series"].items():
            series[f"{key[0]}|{key[2]}|{key[3]}"] = v
    # gzipped (3.3 MB as text with both pool sizes), without a time stamp: the same run, the same bytes
    pd.DataFrame(series).to_csv(res / "series.csv.gz", index=False, float_format="%.6g",
                                compression={"method": "gzip", "mtime": 0})
    d = plan.demand()
    busy = d > 0
    k = 500
    m = len(d) // k * k
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_busy = d[:m].reshape(-1, k).sum(1) / busy[:m].reshape(-1, k).sum(1)
    t = np.arange(len(d)) + plan.origin
    pd.DataFrame({"day": (t[:m].reshape(-1, k)[:, 0] - plan.origin) / 86400, "mean_busy_demand": mean_busy}).to_csv(
        res / "demand.csv", index=False, float_format="%.6g")
    secs = np.zeros(len(plan))
    for t0, t1, rows in plan.segments:
        secs[rows] += t1 - t0
    zic = {dist: {"expected": float(np.mean([(secs * plan.cpus * (draw_values(len(plan), dist, w) + 1) / 2).sum()
                                             for w in range(n_workloads)])),
                  "formula": float(sum(VALUE_RANGES[dist]) / 2 / 2 * plan.cpus.mean() * plan.runtime.mean() * len(plan))}
           for dist in DISTS}
    uncapped_optima(plan, n_workloads, capacities).to_csv(res / "optima.csv", index=False)
    c, r_ = plan.cpus, plan.runtime
    meta = {
        "quick": quick, "n_workloads": n_workloads, "grid_runs": grid_runs, "grid_cells": len(grid),
        "rounds": plan.rounds, "full_rounds": full_rounds, "workers": workers, "notes": notes,
        "minutes": round((time.perf_counter() - t_start) / 60, 1),
        "batches": [{"id": r["id"], "runs": r["runs"], "rounds": r["rounds"], "seconds": round(r["seconds"])}
                    for r in sorted(results, key=lambda r: r["id"])],
        "workload": {"CPU": {"min": float(c.min()), "max": float(c.max()), "mean": float(c.mean()),
                             "median": float(np.median(c))},
                     "runtime (s)": {"min": float(r_.min()), "max": float(r_.max()), "mean": float(r_.mean()),
                                     "median": float(np.median(r_))},
                     "rounds": plan.rounds, "demand_mean": float(d[busy].mean()), "demand_peak": float(d.max()),
                     "above": {str(cap): float((d[busy] > cap).mean()) for cap in (CAPACITY, SENSITIVITY_CAPACITY)}},
        "zic": zic, "truncated": plan.rounds < full_rounds, "capacities": list(capacities)}
    (res / "meta.json").write_text(json.dumps(meta, indent=1))
    return write_report(res, out)


def uncapped_optima(plan, n_workloads: int, capacities) -> pd.DataFrame:
    """Per workload and pool size, the optimum of the other reading of the thesis's definition: every second the
    whole pool at the highest true value present, ``C max_j v_j`` (no request capped at its CPUs), beside ours
    (:func:`~marketsched.mechanisms.online.share.fractional_optimum`)."""
    rows = []
    for dist in DISTS:
        for w in range(n_workloads):
            v = draw_values(len(plan), dist, w)
            top = sum((t1 - t0) * float(v[r].max()) for t0, t1, r in plan.segments if len(r))
            for cap in capacities:
                capped = sum((t1 - t0) * float(sm.fractional_optimum(v[r], plan.cpus[r], cap))
                             for t0, t1, r in plan.segments if len(r))
                rows.append({"capacity": cap, "dist": dist, "workload": w, "optimum": capped, "uncapped": cap * top})
    return pd.DataFrame(rows)


def write_report(results, out_dir=None) -> Path:
    """Write ``report.md``, the figures and ``claims.csv`` from the stored results only."""
    import json

    results = Path(results)
    out = Path(out_dir) if out_dir is not None else results.parent
    meta = json.loads((results / "meta.json").read_text())
    df = pd.read_csv(results / "runs.csv")
    series = pd.read_csv(results / "series.csv.gz")
    demand = pd.read_csv(results / "demand.csv")
    capacities = tuple(meta.get("capacities", (CAPACITY, SENSITIVITY_CAPACITY)))
    from marketsched.analysis import verdicts as V

    rep = Report(out, TITLE)
    batch_lines = "; ".join(f"{b['id']}: {b['runs']} runs x {b['rounds']:,} rounds in {b['seconds']} s"
                            for b in meta["batches"])
    rep.text(
        f"Run: {'quick' if meta['quick'] else 'full'}; pool sizes C = {', '.join(map(str, capacities))}; "
        f"{meta['n_workloads']} workloads per valuation distribution; grid {meta['grid_cells']} cells x "
        f"{meta['grid_runs']} runs; {meta['rounds']:,} of {meta['full_rounds']:,} rounds; {meta['workers']} worker "
        f"processes and {meta['minutes']} min in the last call (a resumed run reuses the batches it stored). "
        f"Batches, each with its own time: {batch_lines}.\n\n"
        "Everything is computed by `marketsched.mechanisms.online.share` (allocation, payments, the market "
        "loop) and `marketsched.behaviour.learning` (bidders); see `docs/shared_resource_markets.md` for "
        "the decisions. Trace: " + meta["notes"]["trace"] + " as the substitute for DAS2-fs0 (not available). "
        f"Stored results: `results/`; `marketsched reproduce {NAME} --report-only --results results` rewrites this "
        "report from them. The thesis's claims are judged at its pool size C = 10; C = 40 is ours."
    )
    c = V.Claims("The thesis's claims (C = 10), our figures and verdicts")
    exact = V.Claims("Exact results: Table 6.1 and section 6.5.3")
    two_user_section(rep, exact)
    reservation_section(rep, exact)
    rep.claims(exact)
    inputs = V.Claims("Table 6.2: the thesis's workload against ours", settings=True)
    workload_section(rep, meta, demand, inputs)
    for cap in capacities:
        results_section(rep, df, meta, cap)
    bids_figure(rep, series, capacities)
    agree = {cap: grid_section(rep, df, meta["grid_runs"], cap) for cap in capacities}
    ours = V.Claims("Our own comparisons: C = 40, per-CPU bids, the optimum without the per-request cap", ours=True)
    claims(df, CAPACITY, c)
    if SENSITIVITY_CAPACITY in capacities:
        claims(df, SENSITIVITY_CAPACITY, ours, prefix=f"C = {SENSITIVITY_CAPACITY}: ")
    _per_cpu_claims(df, ours)
    _d3_claims(df, ours)
    optima = pd.read_csv(results / "optima.csv") if (results / "optima.csv").is_file() else None
    if optima is not None:
        df = _uncapped_efficiency(df, optima)
        _uncapped_claims(df, ours)
    rep.claims(c, intro="Every quantitative statement of section 6.4 and appendix D; figures with their 95% interval "
                        "over the 30 paired workloads (grid cells: over the runs). Absolute utilities and revenues "
                        "depend on the substitute trace and are not attempted; ratios, signs and rankings are judged.")
    rep.claims(inputs, intro="Table 6.2 describes the workload, an input of the runs: listed, not counted.")
    rep.claims(ours)
    rep.heading("Where we differ from the thesis, and why")
    q = df[(df.strategy == "q") & (df.dist == "wide") & (df.rule == "ps")]
    rho = q.groupby("capacity").spearman.mean()
    eff = df[(df.strategy == "q") & (df.capacity == CAPACITY)].efficiency
    pc = df[(df.strategy == "q-per-cpu") & (df.capacity == CAPACITY)].efficiency
    eff1 = df[(df.strategy == "q") & (df.capacity == SENSITIVITY_CAPACITY)].efficiency
    un = df[(df.strategy == "q") & (df.capacity == CAPACITY)].get("efficiency_uncapped", pd.Series(dtype=float)).dropna()
    # a reading comes close when its Table 6.6 rows (our comparisons) are match or near by the rule
    rows = {"per-CPU bids": f"C = {CAPACITY}, per-CPU bids", "the uncapped optimum": f"C = {CAPACITY}, uncapped optimum",
            f"C = {SENSITIVITY_CAPACITY}": f"C = {SENSITIVITY_CAPACITY}: Table 6.6"}
    verdicts = {k: [r.verdict for r in ours.rows if r.where.startswith(w) and "efficiency ratio" in r.claim]
                for k, w in rows.items()}
    reach = [k for k, vs in verdicts.items() if vs and V.worst(vs) in (V.MATCH, V.NEAR_V)]
    rep.text(DIFFERENCES.format(
        c0=CAPACITY, c1=SENSITIVITY_CAPACITY, rho0=_num(rho.get(CAPACITY), ".2f"),
        rho1=_num(rho.get(SENSITIVITY_CAPACITY), ".2f"),
        agree0=_num(agree.get(CAPACITY, {}).get("Spearman"), "+.2f"),
        agree1=_num(agree.get(SENSITIVITY_CAPACITY, {}).get("Spearman"), "+.2f"),
        eff0=f"{eff.min():.2f}-{eff.max():.2f}" if len(eff) else "-",
        eff_pc=f"{pc.min():.2f}-{pc.max():.2f}" if len(pc) else "- (not run)",
        eff1=f"{eff1.min():.2f}-{eff1.max():.2f}" if len(eff1) else "- (not run)",
        eff_un=f"{un.min():.2f}-{un.max():.2f}" if len(un) else "- (not computed)",
        cv_draw=_num(_cv_over_draws(df), ".1%"),
        reach=("Of these, " + " and ".join(reach) + " come near the thesis's figures (every Table 6.6 row match or "
               "near by the rule) and remain candidates; the others do not." if reach else
               "None of them comes near the thesis's figures: the gap stays unexplained."),
    ))
    rep.text(_reversals(c, ours))
    return rep.write()


def _reversals(c, ours) -> str:
    """A bullet naming the section 6.4.2 statements that are not a match at the thesis's pool size, with
    their verdict at the larger pool (our run), so a reversal is discussed, not only counted."""
    from marketsched.analysis import verdicts as V

    other = {(r.where, r.claim): r for r in ours.rows}
    lines, hold_at_c1 = [], 0
    for r in c.rows:
        if not r.where.startswith("Sec. 6.4.2") or r.verdict == V.MATCH:
            continue
        o = other.get((f"C = {SENSITIVITY_CAPACITY}: {r.where}", r.claim))
        at1 = f"{o.verdict} at C = {SENSITIVITY_CAPACITY} ({o.ours})" if o else f"not run at C = {SENSITIVITY_CAPACITY}"
        hold_at_c1 += bool(o and o.verdict == V.MATCH)
        lines.append(f"    - {r.where}: *{r.claim}* ({r.paper}): {r.verdict} at C = {CAPACITY} ({r.ours}); {at1}.")
    if not lines:
        return f"* **Section 6.4.2's statements** are all a match at C = {CAPACITY}."
    return (f"* **Statements of section 6.4.2 that are not a match at C = {CAPACITY}** (our figures with their 95% "
            "interval, as in the tables above):\n" + "\n".join(lines)
            + (f"\n  {hold_at_c1} of them match at C = {SENSITIVITY_CAPACITY}; for those the congestion of the "
               "substitute workload on the smaller pool (first bullet) is the likely cause: the same workloads, "
               "bidders and seeds on the larger pool give the thesis's direction." if hold_at_c1 else ""))


def _paired_ratio(df, strategy, dist, metric, sh_strategy=None):
    """SH / PS over paired workloads: the ratio of means with a bootstrap interval, and the sign test."""
    from marketsched.analysis import verdicts as V

    x, y, p = paired(df, strategy, dist, metric, sh_strategy)
    if len(x) == 0:
        return None, p
    return V.bootstrap_interval(lambda a, b: float(np.mean(b) / np.mean(a)), x, y), p


def claims(df: pd.DataFrame, cap: int, c, prefix: str = "") -> None:
    """The claims of section 6.4.2 and appendix D at one pool size, added to ``c``."""
    from marketsched.analysis import verdicts as V

    d = df[df.capacity == cap]
    where = lambda s: prefix + s  # noqa: E731
    for (strategy, label) in (("zic", "ZIC"), ("q", "Q-learning")):
        for dist in DISTS:
            tp, ts = THESIS_6_4[(strategy, dist)]
            c.not_attempted(where(f"Table 6.4, {label}, {dist}"), "mean utility per request, PS and SH",
                            f"{tp:,} / {ts:,}", "levels depend on the substitute trace (ours in the table above)")
            tp, ts = THESIS_6_5[(strategy, dist)]
            c.not_attempted(where(f"Table 6.5, {label}, {dist}"), "mean revenue, PS and SH", f"{tp:,} / {ts:,}",
                            "levels depend on the substitute trace (ours in the table above)")
    for dist in DISTS:
        iv, p = _paired_ratio(d, "zic", dist, "revenue", "zic-independent")
        c.check(where(f"Table 6.5, ZIC, {dist}"), "SH / PS revenue (ZIC, independent bids)", "1.000", V.value("1.000"),
                iv, fmt=".4f", note=f"sign test p = {p:.2g}")
        tp, ts = THESIS_6_5[("q", dist)]
        printed = f"{ts / tp:.3f}"
        iv, p = _paired_ratio(d, "q", dist, "revenue")
        c.check(where(f"Table 6.5, Q-learning, {dist}"), "SH / PS revenue", printed, V.value(printed), iv, fmt=".3f")
        c.add(where(f"Table 6.5, Q-learning, {dist}"), "significance of SH / PS revenue (two-tailed sign test)", "***",
              f"{V.stars(p) or 'none'} (p = {p:.2g})", V.category_verdict("***", V.stars(p), V.STARS_SCALE))
        for rule, th in zip(("ps", "sh"), THESIS_6_6[dist]):
            x = d[(d.strategy == "q") & (d.dist == dist) & (d.rule == rule)].efficiency
            c.check(where(f"Table 6.6, Q-learning, {dist}"), f"mean efficiency ratio, {rule.upper()}", f"{th:.3f}",
                    V.value(f"{th:.3f}"), V.t_interval(x) if len(x) else None, fmt=".3f")
        x, y, p = paired(d, "q", dist, "efficiency")
        c.add(where(f"Table 6.6, Q-learning, {dist}"), "significance of PS vs SH efficiency (two-tailed sign test)",
              "***", f"{V.stars(p) or 'none'} (p = {p:.2g})", V.category_verdict("***", V.stars(p), V.STARS_SCALE))
        c.check(where(f"Sec. 6.4.2, {dist}"), "PS yields a slightly higher efficiency than SH", "slightly higher",
                V.verbal("slightly higher"), V.relative_paired_interval(x, y) if len(x) else None, fmt=".2%")
        c.check(where(f"Sec. 6.4.2, {dist}"), "both mechanisms approximately equal in efficiency", "almost the same",
                V.verbal("almost the same"), V.relative_paired_interval(y, x) if len(x) else None, fmt=".2%")
    parts = {}
    for dist in DISTS:
        for rule in ("ps", "sh"):
            q = d[(d.strategy == "q") & (d.dist == dist) & (d.rule == rule)].sort_values("workload").mean_utility
            z = d[(d.strategy == "zic") & (d.dist == dist) & (d.rule == rule)].sort_values("workload").mean_utility
            if len(q) and len(q) == len(z):
                parts[f"{dist} {rule}"] = V.paired_interval(q, z)
    for dist in DISTS:  # footnote 9 of sec. 6.4.1
        z = d[(d.strategy == "zic") & (d.dist == dist) & (d.rule == "ps")].mean_pct_bid
        c.check(where(f"Sec. 6.4.1, fn. 9, {dist}"), "with ZIC the users bid about 50% of their true valuation on "
                "average", "~50%", V.verbal("about", 0.5), V.t_interval(z) if len(z) else None, fmt=".3f",
                note="mean bid / value over a workload's request-seconds, PS, over the workloads")
    _parts(c, where("Sec. 6.4.2"), "Q-learning outperforms ZIC in mean utility (both settings, both rules)", "Q > ZIC",
           V.ordering(">"), parts)
    parts = {}
    for dist in DISTS:
        for strategy in ("zic", "q"):
            x, y, _ = paired(d, strategy, dist, "mean_utility")
            if len(x):
                parts[f"{strategy} {dist}"] = V.paired_interval(x, y)
    c.not_attempted(where("Sec. 6.4.2"), "ZIC revenue about v_mean c_mean d_mean 1000: $38,000,000 (narrow), "
                    "$92,300,000 (wide)", "38,000,000 / 92,300,000", "levels depend on the substitute trace")
    parts = {}
    for dist in DISTS:
        z = d[(d.strategy == "zic") & (d.dist == dist) & (d.rule == "ps")].sort_values("workload").revenue
        q = d[(d.strategy == "q") & (d.dist == dist) & (d.rule == "ps")].sort_values("workload").revenue
        if len(z) and len(z) == len(q):
            parts[dist] = V.relative_paired_interval(z, q)
    _parts(c, where("Sec. 6.4.2"), "users drastically overbid with ZIC (revenue, the sum of the bids, above "
           "Q-learning's)", "ZIC > Q", V.ordering(">"), parts, fmt=".3g",
           note="(ZIC - Q) / Q revenue, PS, paired by workload")
    _parts(c, where("Sec. 6.4.2"), "switching from PS to SH reduces the mean utility in all settings", "PS > SH",
           V.ordering(">"), parts)
    parts = {}
    for dist in DISTS:
        x, y, _ = paired(d, "q", dist, "mean_pct_bid")
        if len(x):
            parts[dist] = V.paired_interval(y, x)
    _parts(c, where("Sec. 6.4.2"), "users bid higher with SH than with PS (Q-learning)", "SH > PS", V.ordering(">"),
           parts, note="mean percentage bid (bid / valuation), SH minus PS")
    per = {}
    for dist in DISTS:
        x, y, _ = paired(d, "q", dist, "revenue")
        per[dist] = y / x if len(x) else np.array([])
    if len(per["narrow"]) and len(per["wide"]):
        c.check(where("Sec. 6.4.2"), "the SH revenue increase is smaller with more heterogeneous (wide) valuations",
                "narrow > wide", V.ordering(">"), V.welch_interval(per["narrow"], per["wide"]), fmt=".3g",
                note="per-workload SH / PS, narrow minus wide (Welch: different valuation draws)")
    parts = {}
    for rule in ("ps", "sh"):
        a = d[(d.strategy == "q") & (d.dist == "narrow") & (d.rule == rule)].efficiency
        b = d[(d.strategy == "q") & (d.dist == "wide") & (d.rule == rule)].efficiency
        if len(a) and len(b):
            parts[rule] = V.welch_interval(a, b)
    _parts(c, where("Sec. 6.4.2"), "more heterogeneous valuations slightly lower the efficiency of both mechanisms",
           "narrow > wide", V.ordering(">"), parts, note="efficiency narrow minus wide (Welch)")
    # appendix D and section 6.4.1
    g = d[(d.strategy == "grid")]
    if len(g):
        for i, p in enumerate(parameter_grid()):
            cell = g[(g.alpha == p["alpha"]) & (g.gamma == p["gamma"]) & (g.epsilon == p["epsilon"])]
            label = f"Table D.{{}}, ({p['alpha']:g}, {p['gamma']:g}, {p['epsilon']:g})"
            if cell.empty:
                for k, th in ((1, THESIS_D1[i]), (2, THESIS_D2[i]), (3, THESIS_D3[i])):
                    c.not_attempted(where(label.format(k)), "grid cell", f"{th:g}", "cell not run")
                continue
            # the thesis's figures as printed (Stößer 2009, appendix D: "0.76", "0.02" have two decimals)
            d1, d3 = f"{THESIS_D1[i]:g}", f"{THESIS_D3[i]:g}"
            c.check(where(label.format(1)), "Spearman correlation of the mean percentage bid with demand",
                    d1, V.value(d1), V.t_interval(cell.spearman), fmt=".3f")
            c.not_attempted(where(label.format(2)), "mean utility per request", f"{THESIS_D2[i]:,}",
                            "level depends on the substitute trace")
            rev = cell.revenue.to_numpy()
            c.check(where(label.format(3)), "coefficient of variation of revenue over the runs", d3,
                    V.value(d3), V.bootstrap_interval(_cv, rev) if len(rev) > 2 else None, fmt=".4f")
        means = g.groupby(["alpha", "gamma", "epsilon"]).agg(spearman=("spearman", "mean"), util=("mean_utility", "mean"))
        for col, what in (("spearman", "largest correlation with demand"), ("util", "largest mean utility")):
            params = means.index.to_frame().to_numpy()  # the cell with the largest mean (first on ties)
            best = tuple(float(v) for v in params[int(np.argmax(means[col].to_numpy()))])
            c.add(where("Sec. 6.4.1"), f"(0.3, 0.3, 0.05) gives the {what}", "(0.3, 0.3, 0.05)", str(best),
                  V.category_verdict((0.3, 0.3, 0.05), best), "cell means over the runs")
        cvs = g.groupby(["alpha", "gamma", "epsilon"]).revenue.agg(lambda r: r.std(ddof=1) / r.mean())
        c.check(where("Sec. 6.4.1"), "the coefficient of variation is never larger than 6.5%", "<= 6.5%",
                V.bound("<=", "0.065"), V.exact(float(cvs.max())), fmt=".4f", note="largest over the grid's cells")
        # the grid's trends (Stößer 2009, sec. 6.4.1): the smallest against the largest level of one parameter,
        # paired over the 12 cells of the other two (cell means over the runs)
        cell = means.assign(cv=cvs)
        for param, col, what in (("gamma", "spearman", "increasing the discount factor gamma reduces the correlation"),
                                 ("epsilon", "spearman", "increasing the exploration parameter epsilon reduces the "
                                                         "correlation"),
                                 ("epsilon", "cv", "increasing the exploration parameter epsilon gives less variation "
                                                   "in the payments")):
            levels = sorted(cell.index.get_level_values(param).unique())
            lo, hi = (cell.xs(v, level=param)[col] for v in (levels[0], levels[-1]))
            c.check(where("Sec. 6.4.1"), what, "decreasing", V.ordering(">"),
                    V.paired_interval(lo, hi.reindex(lo.index)) if len(levels) > 1 else None, fmt=".3g",
                    note=f"{param} = {levels[0]:g} minus {levels[-1]:g}, paired over the cells of the other two")
        ch = g[(g.alpha == 0.3) & (g.gamma == 0.3) & (g.epsilon == 0.05)].revenue.to_numpy()
        if len(ch) > 2:
            c.check(where("Sec. 6.4.1"), "the chosen cell's coefficient of variation is 1.3%", "1.3%", V.value("0.013"),
                    V.bootstrap_interval(_cv, ch), fmt=".4f")
    for what in ("an increase in demand first causes a short drop in the mean percentage bid (Fig. 6.3)",
                 "the results hold for SH and narrow valuations, with smaller differences between cells",
                 "results robust to non-zero initial Q-values"):
        c.not_attempted(where("Sec. 6.4.1"), what, "qualitative", "not run")


def _cv(r) -> float:
    """Coefficient of variation (sample standard deviation / mean)."""
    return float(np.std(r, ddof=1) / np.mean(r))


def _draw_revenues(df: pd.DataFrame) -> np.ndarray:
    """Revenue of the Q-learning runs (PS, wide, the thesis's pool size), one per valuation draw."""
    q = df[(df.strategy == "q") & (df.dist == "wide") & (df.rule == "ps") & (df.capacity == CAPACITY)]
    return q.sort_values("workload").revenue.to_numpy()


def _cv_over_draws(df: pd.DataFrame) -> float | None:
    r = _draw_revenues(df)
    return _cv(r) if len(r) > 2 else None


def _d3_claims(df: pd.DataFrame, o) -> None:
    """Why our Table D.3 CVs differ (ours, not counted): what the thesis's runs redraw, and the pattern
    against the scale. Stößer (2009), appendix D.4: "the coefficient of variation for the total payments
    across 10 runs"; our 10 runs of a cell differ in the bidders' seeds only (module docstring).

    1. Redrawing the valuations per run: the CV over the Q-learning runs' draws (bootstrap over draws)
       against the thesis's largest cell, 0.065: above it, the thesis's runs cannot have redrawn them.
    2. The pattern: Spearman correlation of our 36 cell CVs with the thesis's (above 0: the same order).
    3. The scale: the median of thesis / ours over the cells, against 1 (the same scale).
    """
    from scipy import stats as st

    from marketsched.analysis import verdicts as V

    r = _draw_revenues(df)
    if len(r) > 2:
        o.check("Table D.3, what is redrawn", "valuations redrawn per run: CV of revenue above every thesis cell",
                "> 0.065", V.bound(">", "0.065"), V.bootstrap_interval(_cv, r), fmt=".4f",
                note=f"Q-learning, PS, wide, C = {CAPACITY}: CV over {len(r)} valuation draws; the thesis's cells are "
                     "0.003-0.065, so its runs redrew the bidders, as ours do")
    g = df[(df.strategy == "grid") & (df.capacity == CAPACITY)]
    cvs = g.groupby(["alpha", "gamma", "epsilon"]).revenue.agg(_cv)
    ours = np.array([cvs.get((p["alpha"], p["gamma"], p["epsilon"]), np.nan) for p in parameter_grid()])
    if len(g) and np.isfinite(ours).all():
        rho = float(st.spearmanr(ours, THESIS_D3).statistic)
        o.check("Table D.3, pattern", "our cells' CVs in the thesis's order (Spearman over the 36 cells)", "> 0",
                V.bound(">", 0.0, exact=True), V.exact(rho), fmt=".2f", note="the order of the cells is reproduced")
        ratio = float(np.median(np.asarray(THESIS_D3) / ours))
        o.check("Table D.3, scale", "the thesis's CVs over ours (median over the 36 cells)", "1",
                V.value(1.0, exact=True), V.exact(ratio), fmt=".2f",
                note="open: the scale is not reproduced (the substitute trace's congestion is one candidate)")


def _parts(c, where, claim, paper, region, parts: dict, fmt=".3g", note=""):
    from marketsched.analysis import verdicts as V

    if not parts:
        return c.not_attempted(where, claim, paper, "no runs")
    vs = {k: V.judge(region, iv) for k, iv in parts.items()}
    worst = V.worst(vs.values())
    return c.add(where, claim, paper, "; ".join(f"{k}: {iv.text(fmt)}" for k, iv in parts.items()), worst,
                 (note + "; " if note else "") + "paired over workloads unless noted")


def _per_cpu_claims(df: pd.DataFrame, o) -> None:
    """Ours: the rule applied to per-CPU bids instead of totals, against Table 6.6 and 6.5."""
    from marketsched.analysis import verdicts as V

    for cap in (CAPACITY, SENSITIVITY_CAPACITY):
        d = df[(df.capacity == cap) & (df.strategy == "q-per-cpu")]
        for dist in DISTS:
            for rule, th in zip(("ps", "sh"), THESIS_6_6[dist]):
                x = d[(d.dist == dist) & (d.rule == rule)].efficiency
                if len(x):
                    o.check(f"C = {cap}, per-CPU bids, {dist}", f"mean efficiency ratio, {rule.upper()}", f"{th:.3f}",
                            V.value(f"{th:.3f}"), V.t_interval(x), fmt=".3f",
                            note="the rule applied to b_jt instead of b_jt c_j")
            iv, p = _paired_ratio(d, "q-per-cpu", dist, "revenue")
            if iv is not None:
                tp, ts = THESIS_6_5[("q", dist)]
                o.check(f"C = {cap}, per-CPU bids, {dist}", "SH / PS revenue", f"{ts / tp:.3f}",
                        V.value(f"{ts / tp:.3f}"), iv, fmt=".3f", note=f"sign test p = {p:.2g}")


def _num(x, fmt: str) -> str:
    """``x`` formatted, or "- (not run)" when there is no figure."""
    return "- (not run)" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _uncapped_efficiency(df: pd.DataFrame, optima: pd.DataFrame) -> pd.DataFrame:
    """Add ``efficiency_uncapped`` (welfare over ``C max_j v_j`` per second) to the runs of the 30 workloads, after
    checking that the stored optimum is the one recomputed with the cap."""
    key = ["capacity", "dist", "workload"]
    m = df.merge(optima.rename(columns={"optimum": "optimum_check"}), on=key, how="left")
    own = m.strategy.isin(["zic", "zic-independent", "q", "q-per-cpu"]) & m.uncapped.notna()
    gap = float((abs(m.optimum - m.optimum_check) / m.optimum)[own].max()) if own.any() else 0.0
    if gap > 1e-9:
        raise ValueError(f"stoesser-ch6 results: the stored optima differ from optima.csv by {gap:.3g} (relative)")
    m["efficiency_uncapped"] = np.where(own, m.welfare / m.uncapped, np.nan)
    return m.drop(columns=["optimum_check", "uncapped"])


def _uncapped_claims(df: pd.DataFrame, o) -> None:
    """Ours: Table 6.6 with the optimum read as the whole pool at the highest value present, every second."""
    from marketsched.analysis import verdicts as V

    for cap in (CAPACITY, SENSITIVITY_CAPACITY):
        d = df[(df.capacity == cap) & (df.strategy == "q")]
        for dist in DISTS:
            for rule, th in zip(("ps", "sh"), THESIS_6_6[dist]):
                x = d[(d.dist == dist) & (d.rule == rule)].efficiency_uncapped.dropna()
                if len(x):
                    o.check(f"C = {cap}, uncapped optimum, {dist}", f"mean efficiency ratio, {rule.upper()}",
                            f"{th:.3f}", V.value(f"{th:.3f}"), V.t_interval(x), fmt=".3f",
                            note="welfare / (C x the highest true value) per second, no request capped at its CPUs")


DIFFERENCES = """
* **Workload.** DAS2-fs0 is not available; the substitute's first 1,000 requests leave 751 after the
  >10-CPU filter (the thesis: 984), with 3.75 CPUs and 3,901 s per request on average (the thesis: 2.08
  and 1,044 s), so on C = {c0} demand is above supply most of the time instead of in peaks. Absolute
  utilities and revenues are therefore not comparable; signs, ratios and rankings are.
* **The correlation criterion depends on that congestion.** With Q-learning (PS, wide, chosen parameters)
  the Spearman correlation of the mean percentage bid with demand is {rho0} on C = {c0} and {rho1}
  on C = {c1} (the thesis: 0.808). On C = {c0} the pool is saturated most of the time, so demand changes
  hardly move a request's share bin (the learner's state) and bids; on C = {c1}, as in the thesis's market,
  a rise in demand pushes requests from full to partial shares and their bids follow. The ranking of the
  grid's cells by this criterion agrees with Table D.1 at {agree0} (C = {c0}) and {agree1}
  (C = {c1}) (Spearman over the grid's cells).
* **Efficiency levels** ({eff0} per run here on C = {c0}, 0.80-0.83 in the thesis). Our optimum is the
  thesis's ("the resource allocated exclusively to the requests with the highest (true) valuation", per
  second, each request capped at its CPUs), so the definition does not explain the gap; an earlier
  version of this report said it did, and that explanation is withdrawn. Tested instead (our comparisons
  above, Q-learning runs): the rules applied to per-CPU bids instead of totals (the other reading of an
  open point) give {eff_pc}; the optimum read without the cap (the whole pool at the highest value
  present, C max v per second) gives {eff_un}; a less congested pool, C = {c1}, gives {eff1}. {reach}
* **Common random numbers.** PS and SH see the same valuations and (ZIC) the same bids, so ZIC revenue
  is equal by construction; the independent-stream rows reproduce the thesis's noisy version of the check.
* **Open points of the thesis** (chapter 6 leaves them open) are decided in the modules' docstrings: rule
  input is the total bid b c; b_min = 1; exploit bids at the bin's upper end; one uniform per request and
  second; a request starts in state 0; shared tables updated in request order; the optimum is the
  per-second fractional knapsack. Any of them can move the Q-learning numbers; none changes the ZIC
  numbers or the two-user and reservation results, which are exact.
* **Grid runs** use one valuation draw and 10 bidder seeds (module docstring); with redrawn valuations
  the CV of revenue would be dominated by the draw ({cv_draw} over the Q-learning runs' valuation draws,
  PS, wide, C = {c0}; see the Table D.3 rows of our comparisons).
"""
