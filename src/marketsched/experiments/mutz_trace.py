"""Trace-driven extension of Mutz (2008): EES and relaxed EES against FCFS and EASY.

The thesis evaluates its batch-queue auctions on static snapshots only (no traces, no FCFS/EASY,
no utilization or slowdown). This comparison is an extension. The only thesis statements it can judge are the
currency flows of sections 4.1 and 6.1 (discarded jobs gain currency, jobs that run lose it).

What is run (``run``):

1. **Workload.** Full: the first :data:`JOBS` jobs of the SDSC-SP2 log (Parallel Workloads
   Archive, ``SDSC-SP2-1998-4.2-cln``, 128 nodes). Why this log: the thesis names SDSC as an
   example site of its setting (thesis L93-95), every job has a user run-time request (the
   EES needs a declared maximal run time r, and EASY plans with it), it is a standard
   backfilling log (Mu'alem & Feitelson 2001), and its first 3,000 jobs (33 days, offered
   load 0.66) are small enough for the Monte Carlo payments at every decision. ``quick``: the
   built-in synthetic parallel workload (:data:`QUICK_JOBS` jobs, 64 nodes, load 0.9).
2. **Declared run times** (:func:`~marketsched.mechanisms.online.ees_driver.declared_runtime`):
   r = max(request, actual, 1 s), written into the workload's estimate column, so EASY and both
   EES variants plan with the same r.
3. **Types**: v ~ U(0, 100) currency and d ~ U(0, ``d_max``) currency per hour, drawn per job
   from the declared prior (:func:`~marketsched.mechanisms.online.ees_driver.synthesize_types`,
   seeded by (seed, job id): common random numbers across mechanisms). Main setting
   ``d_max`` = 10 (a median patience v/d of about 10 h, the order of the log's waits); a
   sensitivity sweep over ``d_max`` in :data:`D_MAX_SWEEP`.
4. **Mechanisms**: FCFS, EASY (their schedules do not depend on values: run once, scored per
   seed), EES (full width, one job at a time), relaxed EES (with compression of commitments)
   and relaxed EES with fixed commitments, ``n_draws`` Monte Carlo draws per expectation (the
   cached estimator: payments balance exactly at every decision).
5. **Measures** per run: realised utility (``realised_utility``), utilization, mean wait and
   bounded slowdown of completed jobs, mean queue time of all jobs (discarded jobs count until
   their discard), discard rate, share of the total value realised, payments (revenue = sum,
   gross volume, mean payment of run and of discarded jobs), decisions and queue length I.
6. Report: tables (mean and 95% interval over seeds) and figures.

:func:`run` stores the per-run table, the per-job view of one seed and the decisions in
``OUT/results``; :func:`write_report` reads only those.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from marketsched.analysis.metrics import summarize
from marketsched.engine.records import FinalState
from marketsched.engine.simulator import Simulator
from marketsched.experiments.report import Report
from marketsched.experiments.tasks import Task, run_tasks
from marketsched.mechanisms.online.ees import TypePrior, Uniform
from marketsched.mechanisms.online.ees_driver import (
    EESPolicy,
    RelaxedEESPolicy,
    declared_runtime,
    queue_time,
    realised_utility,
    synthesize_types,
)

NAME = "mutz-trace"
TITLE = "Mutz (2008) on a trace: EES and relaxed EES vs FCFS and EASY with synthesised values"
QUICK_TIME = "~5 s"  # CPU time of --quick (user + system, all processes), measured
EXTENSION = True  # our extension of the thesis: its report counts no claim of the thesis

TRACE = "SDSC-SP2-1998-4.2-cln"
JOBS = 3000
QUICK_JOBS, QUICK_NODES = 400, 64
V_MAX = 100.0
D_MAX = 10.0                     # main setting: d ~ U(0, 10) per hour
D_MAX_SWEEP = (1.0, 10.0, 100.0)
TIME_UNIT = 3600.0               # d is per hour
MECHANISMS = ("fcfs", "easy", "ees", "relaxed-ees", "relaxed-ees-fixed")
LABELS = {"fcfs": "FCFS", "easy": "EASY", "ees": "EES", "relaxed-ees": "relaxed EES",
          "relaxed-ees-fixed": "relaxed EES (fixed)"}
COLORS = {"fcfs": "tab:gray", "easy": "tab:blue", "ees": "tab:red", "relaxed-ees": "tab:green",
          "relaxed-ees-fixed": "tab:olive"}


@dataclass(frozen=True)
class Cell:
    quick: bool
    mechanism: str
    seed: int        # type draws and Monte Carlo stream (0 for the value-blind schedules)
    d_max: float
    n_draws: int


# --------------------------------------------------------------------------- workload
@lru_cache(maxsize=2)
def build_workload(quick: bool):
    """The workload of the run with r written into its estimate column; (workload, notes)."""
    from marketsched.workloads import Workload, first_jobs, load_trace, to_workload
    from marketsched.workloads.synthetic import synthetic_workload

    if quick:
        w = synthetic_workload(QUICK_JOBS, capacity=QUICK_NODES, parallel=True, seed=0)
        notes = [f"built-in synthetic parallel workload: {len(w)} jobs, {w.capacity} nodes, seed 0, load 0.9"]
    else:
        w, rep = to_workload(load_trace(TRACE))
        w = first_jobs(w, JOBS)
        notes = [f"{TRACE}: first {len(w):,} jobs after cleaning ({rep.n_dropped:,} cancelled jobs dropped from the "
                 f"whole log), {w.capacity} nodes"]
    r, adj = declared_runtime(w)
    notes.append(f"declared run time r = max(request, actual, 1 s): {adj['raised']} requests below the actual run "
                 f"time raised, {adj['missing']} missing, {adj['floored']} floored at 1 s")
    w = Workload.from_columns(**{**w.columns, "runtime_estimate": r}, capacity=w.capacity, name=w.name,
                              meta=w.meta, sort=False)
    return w, tuple(notes)


def prior_for(d_max: float) -> TypePrior:
    return TypePrior(value=Uniform(0.0, V_MAX), delay_cost=Uniform(0.0, d_max))


# --------------------------------------------------------------------------- one cell
def run_cell(cell: Cell) -> dict:
    """Simulate one mechanism (value-aware ones for one seed and d_max); raw results."""
    from marketsched.scenario import make_mechanism

    w, _ = build_workload(cell.quick)
    t0 = time.perf_counter()
    if cell.mechanism in ("fcfs", "easy"):
        pol = make_mechanism(cell.mechanism, w)
    else:
        v, d = synthesize_types(w, prior_for(cell.d_max), cell.seed)
        kw: dict[str, Any] = dict(n_draws=cell.n_draws, seed=cell.seed, time_unit=TIME_UNIT)
        if cell.mechanism == "ees":
            pol = EESPolicy(v, d, prior_for(cell.d_max), **kw)
        else:
            pol = RelaxedEESPolicy(v, d, prior_for(cell.d_max), compress=(cell.mechanism == "relaxed-ees"), **kw)
    rec = Simulator(w, pol).run()
    out = {"cell": cell, "records": rec, "wall_s": time.perf_counter() - t0}
    if cell.mechanism not in ("fcfs", "easy"):
        times = np.array([t for _, t, _ in pol.ledger.rows])
        out.update(decision_time=times, queue_len=np.array(pol.queue_lengths), moved_up=getattr(pol, "moved_up", 0))
    return out


def measures(w, rec, v, d, extra: dict | None = None) -> dict:
    """The per-run measures of the report (see the module docstring, step 5)."""
    s = summarize(w, rec)
    u = realised_utility(w, rec, v, d, TIME_UNIT)
    q = queue_time(w, rec)
    done = rec.state == FinalState.COMPLETED
    disc = rec.state == FinalState.DISCARDED
    p = rec.payment
    out = {
        "jobs": len(w), "completed": int(done.sum()), "discarded": int(disc.sum()),
        "discard_rate": float(disc.mean()),
        "utility_per_job": float(u.mean()), "total_utility": float(u.sum()),
        "value_realised_share": float(v[done].sum() / v.sum()),
        "waiting_cost_per_job": float((d * q).sum() / TIME_UNIT / len(w)),
        "negative_utility_share": float((u < 0).mean()),
        "utilization": float(s["utilization"]),
        "mean_wait_h": float(s["mean_wait"]) / 3600, "mean_bsd": float(s["mean_bsd"]),
        "mean_queue_time_h": float(q.mean()) / 3600,
        "revenue": float(p.sum()), "payment_volume": float(np.abs(p).sum()),
        "mean_payment_run": float(p[done].mean()) if done.any() else np.nan,
        "mean_payment_discarded": float(p[disc].mean()) if disc.any() else np.nan,
    }
    if extra:
        out.update(extra)
    return out


# --------------------------------------------------------------------------- the experiment
def _cells(quick: bool, seeds: list[int], n_draws: int) -> list[Cell]:
    cells = [Cell(quick, m, 0, D_MAX, n_draws) for m in ("fcfs", "easy")]
    for seed in seeds:
        for m in ("ees", "relaxed-ees", "relaxed-ees-fixed"):
            cells.append(Cell(quick, m, seed, D_MAX, n_draws))
        for dm in D_MAX_SWEEP:
            if dm != D_MAX:
                cells += [Cell(quick, m, seed, dm, n_draws) for m in ("ees", "relaxed-ees")]
    # longest first, so the pool is not left waiting on one long cell at the end
    cost = {"relaxed-ees-fixed": 3, "relaxed-ees": 2, "ees": 1, "fcfs": 0, "easy": 0}
    return sorted(cells, key=lambda c: -cost[c.mechanism])


def simulate_all(quick: bool, seeds: list[int], n_draws: int, workers: int, executor: str, store) -> list[dict]:
    """Every cell's raw results, in the declared order; each cell a task stored in ``store`` (resumable)."""
    from dataclasses import astuple

    cells = _cells(quick, seeds, n_draws)
    build_workload(quick)  # fail early (e.g. trace missing) before starting workers
    tasks = [Task(astuple(c), run_cell, (c,)) for c in cells]
    done = run_tasks(tasks, store, executor, workers, description="mutz-trace simulations").results
    return [done[t.key] for t in tasks]


def tabulate(results: list[dict], quick: bool, seeds: list[int]) -> pd.DataFrame:
    """One row per (mechanism, seed, d_max); value-blind schedules scored under every seed/d_max."""
    w, _ = build_workload(quick)
    rows = []
    blind = {r["cell"].mechanism: r for r in results if r["cell"].mechanism in ("fcfs", "easy")}
    aware = [r for r in results if r["cell"].mechanism not in ("fcfs", "easy")]
    for seed in seeds:
        for dm in D_MAX_SWEEP:
            v, d = synthesize_types(w, prior_for(dm), seed)
            for m, r in blind.items():
                rows.append({"mechanism": m, "seed": seed, "d_max": dm,
                             **measures(w, r["records"], v, d, {"wall_s": r["wall_s"]})})
            for r in aware:
                c = r["cell"]
                if c.seed == seed and c.d_max == dm:
                    rows.append({"mechanism": c.mechanism, "seed": seed, "d_max": dm,
                                 **measures(w, r["records"], v, d, {
                                     "wall_s": r["wall_s"], "decisions": len(r["queue_len"]),
                                     "mean_queue_len": float(r["queue_len"].mean()),
                                     "max_queue_len": int(r["queue_len"].max()), "moved_up": r["moved_up"]})})
    df = pd.DataFrame(rows)
    order = {m: k for k, m in enumerate(MECHANISMS)}
    return df.sort_values(["d_max", "mechanism", "seed"], key=lambda s: s.map(order) if s.name == "mechanism" else s,
                          ignore_index=True)


def paired_gain(df: pd.DataFrame, mech: str, base: str, d_max: float):
    """Utility per job of ``mech`` minus ``base`` (same types per seed): the t-interval over seeds."""
    from marketsched.analysis.verdicts import paired_interval

    sub = df[df.d_max == d_max].pivot_table(index="seed", columns="mechanism", values="utility_per_job")
    return paired_interval(sub[mech], sub[base])


def _pays(x: float) -> str:
    return f"paid {x:.2f}" if x >= 0 else f"received {-x:.2f}"


def summary(df: pd.DataFrame, d_max: float, cols) -> pd.DataFrame:
    """Mean of ``cols`` per mechanism at ``d_max`` with its 95% t-interval over seeds."""
    from marketsched.analysis.verdicts import t_interval

    sub = df[df.d_max == d_max]
    out = []
    for m in MECHANISMS:
        g = sub[sub.mechanism == m]
        if g.empty:
            continue
        row = {"mechanism": LABELS[m]}
        for c in cols:
            x = g[c].astype(float)
            row[c] = t_interval(x.to_numpy()).text(".4g") if len(x) > 1 and x.std(ddof=1) > 0 else f"{x.mean():.4g}"
        out.append(row)
    return pd.DataFrame(out)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _half(x) -> float:
    """Half-width of the 95% t-interval of the mean over seeds (0 for one seed)."""
    from marketsched.analysis.verdicts import t_interval

    iv = t_interval(np.asarray(x, dtype=float))
    return iv.hi - iv.estimate


def fig_main(df: pd.DataFrame):
    plt = _plt()
    panels = [("utility_per_job", "realised utility per job"), ("utilization", "utilization"),
              ("mean_wait_h", "mean wait, completed jobs (h)"), ("mean_bsd", "mean bounded slowdown"),
              ("discard_rate", "discard rate"), ("mean_queue_time_h", "mean queue time, all jobs (h)")]
    fig, axes = plt.subplots(2, 3, figsize=(11, 5.6))
    sub = df[df.d_max == D_MAX]
    for ax, (col, title) in zip(axes.ravel(), panels):
        g = sub.groupby("mechanism")[col]
        ms = [m for m in MECHANISMS if m in g.groups]
        mean = g.mean().reindex(ms)
        half = [_half(g.get_group(m)) for m in ms]
        ax.bar(range(len(ms)), mean.values, yerr=half, color=[COLORS[m] for m in ms], capsize=3)
        ax.set_xticks(range(len(ms)), [LABELS[m] for m in ms], rotation=30, ha="right", fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.axhline(0, color="k", lw=0.5)
    fig.tight_layout()
    return fig


def fig_sensitivity(df: pd.DataFrame):
    plt = _plt()
    panels = [("utility_per_job", "realised utility per job"), ("discard_rate", "discard rate"),
              ("utilization", "utilization"), ("mean_queue_time_h", "mean queue time, all jobs (h)")]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.0))
    for ax, (col, title) in zip(axes, panels):
        for m in MECHANISMS:
            g = df[df.mechanism == m].groupby("d_max")[col]
            if len(g.groups) < 2:
                continue
            mean = g.mean()
            ax.errorbar(mean.index, mean.values, yerr=[_half(g.get_group(x)) for x in mean.index], marker="o", ms=3,
                        capsize=2, color=COLORS[m], label=LABELS[m])
        ax.set_xscale("log")
        ax.set_xlabel("d_max (currency per hour; d ~ U(0, d_max))", fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    return fig


def job_view(results: list[dict], quick: bool, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-job utility, payment and final state (one seed, main d_max) and the EES decisions."""
    w, _ = build_workload(quick)
    v, d = synthesize_types(w, prior_for(D_MAX), seed)
    jobs, dec = [], []
    for r in results:
        c = r["cell"]
        if c.d_max != D_MAX or (c.mechanism not in ("fcfs", "easy") and c.seed != seed):
            continue
        rec = r["records"]
        jobs.append(pd.DataFrame({"mechanism": c.mechanism, "utility": realised_utility(w, rec, v, d, TIME_UNIT),
                                  "payment": rec.payment, "state": [FinalState(x).name for x in rec.state]}))
        if c.mechanism in ("ees", "relaxed-ees"):
            dec.append(pd.DataFrame({"mechanism": c.mechanism, "day": r["decision_time"] / 86400,
                                     "queue_len": r["queue_len"]}))
    return pd.concat(jobs, ignore_index=True), pd.concat(dec, ignore_index=True) if dec else pd.DataFrame()


def fig_jobs(jobs: pd.DataFrame, dec: pd.DataFrame):
    """Per-job view for one seed at the main d_max: utility CDF, payments by state, queue length I."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.2))
    for m in MECHANISMS:
        g = jobs[jobs.mechanism == m]
        if g.empty:
            continue
        u = np.sort(g.utility.to_numpy())
        axes[0].plot(u, np.arange(1, len(u) + 1) / len(u), color=COLORS[m], label=LABELS[m], lw=1)
        if m in ("ees", "relaxed-ees"):
            for k, name in enumerate(("COMPLETED", "DISCARDED")):
                p = g[g.state == name].payment.to_numpy()
                if len(p):
                    axes[1].boxplot(p, positions=[(0 if m == "ees" else 1) * 3 + k], widths=0.7, showfliers=False)
            dd = dec[dec.mechanism == m]
            axes[2].plot(dd.day, dd.queue_len, ".", ms=1.5, color=COLORS[m], label=LABELS[m])
    axes[0].set_xlim(left=np.percentile(jobs.utility, 1))
    axes[0].set_xlabel("realised utility of a job", fontsize=8)
    axes[0].set_title("per-job utility (CDF)", fontsize=9)
    axes[0].legend(fontsize=6)
    axes[1].set_xticks([0, 1, 3, 4], ["EES ran", "EES disc.", "rel. ran", "rel. disc."], fontsize=7)
    axes[1].axhline(0, color="k", lw=0.5)
    axes[1].set_title("total payment per job (> 0 pays)", fontsize=9)
    axes[2].set_xlabel("day", fontsize=8)
    axes[2].set_title("queue length I at each decision", fontsize=9)
    axes[2].legend(fontsize=6, markerscale=5)
    for ax in axes:
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def run(out_dir, quick: bool = False, seeds: int | None = None, workers: int | None = None,
        executor: str = "process") -> Path:
    """Simulate every cell (resuming from ``out_dir/tasks``), store the results in ``out_dir/results``, write the
    report from them."""
    import json

    out_dir = Path(out_dir)
    t_start = time.perf_counter()
    n_seeds = seeds or (2 if quick else 5)
    seed_list = list(range(1, n_seeds + 1))
    n_draws = 100 if quick else 200
    workers = workers or max(1, min(2, os.cpu_count() or 1))
    results = simulate_all(quick, seed_list, n_draws, workers, executor, out_dir / "tasks")
    df = tabulate(results, quick, seed_list)
    res = out_dir / "results"
    res.mkdir(parents=True, exist_ok=True)
    df.to_csv(res / "results.csv", index=False)
    jobs, dec = job_view(results, quick, seed_list[0])
    jobs.to_csv(res / "jobs_seed.csv.gz", index=False, float_format="%.6g")
    dec.to_csv(res / "decisions_seed.csv.gz", index=False, float_format="%.6g")
    w, notes = build_workload(quick)
    (res / "meta.json").write_text(json.dumps({
        "quick": quick, "seeds": seed_list, "n_draws": n_draws, "workers": workers, "notes": list(notes),
        "capacity": int(w.capacity), "seconds": round(time.perf_counter() - t_start), "cores": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 1)}, indent=1))
    return write_report(res, out_dir)


def write_report(results, out_dir=None) -> Path:
    """Write ``report.md``, the figures and ``claims.csv`` from the stored results only."""
    import json

    results = Path(results)
    out_dir = Path(out_dir) if out_dir is not None else results.parent
    meta = json.loads((results / "meta.json").read_text())
    df = pd.read_csv(results / "results.csv")
    jobs = pd.read_csv(results / "jobs_seed.csv.gz")
    dec = pd.read_csv(results / "decisions_seed.csv.gz")
    rep = Report(out_dir, TITLE)
    _write_report(rep, df, jobs, dec, meta)
    return rep.write()


def _write_report(rep, df, jobs, dec, meta):
    from marketsched.analysis import verdicts as V

    quick, seeds, n_draws, workers, notes = meta["quick"], meta["seeds"], meta["n_draws"], meta["workers"], meta["notes"]
    main = df[df.d_max == D_MAX]

    def m(mech, col):
        return float(main[main.mechanism == mech][col].mean())

    walls = df.groupby("mechanism")["wall_s"].mean()
    rep.text(f"""
Run {'quick' if quick else 'full'} in {meta['seconds']:.0f} s ({workers} worker processes; load average
{meta['load_average']:.1f} on {meta['cores']} cores at the end). An extension, not a reproduction:
the thesis has no traces, no FCFS/EASY baseline and no utilization or slowdown numbers, so this report
has no claim of the thesis to count (0 on the scoreboard). Its comparisons below are ours, listed apart:
the thesis's statements on currency flows checked on a workload it did not run, and our question whether
the relaxed EES realises more utility than EASY.
Stored results: `results/` (`results.csv`: one row per mechanism, seed and d_max; the per-job view of
seed {seeds[0]}); `marketsched reproduce {NAME} --report-only --results results` rewrites this report from
them. Method and decisions: `docs/mutz_trace.md` and the docstrings of
`marketsched.mechanisms.online.ees_driver` and `marketsched.experiments.mutz_trace`.

Set-up:

* Workload: {notes[0]}. {notes[1]}.
* Types (per job, seeded by (seed, job id), the same in every mechanism): v ~ U(0, {V_MAX:g}),
  d ~ U(0, d_max) per hour of queueing; main setting d_max = {D_MAX:g}; sweep d_max in
  {', '.join(f'{x:g}' for x in D_MAX_SWEEP)}. Seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}).
* EES and relaxed EES: truthful reports, the same prior declared to the mechanism, {n_draws} Monte
  Carlo draws per expectation (cached estimator: payments sum to zero at every decision).
  "relaxed EES" compresses commitments after early ends, "relaxed EES (fixed)" keeps them.
  FCFS and EASY ignore values: one schedule each, scored under every seed's types.
* Realised utility of a job: u = v 1{{completed}} - d x (time queued, h) - payment (queue time of a
  discarded job runs to its discard).
* Mean wall time per simulation: {', '.join(f'{LABELS[k]} {walls[k]:.1f} s' for k in MECHANISMS if k in walls)}.
""")
    rep.heading(f"Main setting (d_max = {D_MAX:g} per hour)")
    rep.figure(fig_main(df), "main", caption=f"Mean over {len(seeds)} seeds (error bars: 95% t-interval over seeds); "
                                             f"wait and slowdown over completed jobs only")
    rep.table(summary(df, D_MAX, ["utility_per_job", "value_realised_share", "waiting_cost_per_job",
                                  "discard_rate", "negative_utility_share"]),
              caption="Welfare: utility per job, share of all jobs' value realised, waiting cost per job, "
                      "discards, share of jobs with negative utility")
    rep.table(summary(df, D_MAX, ["utilization", "mean_wait_h", "mean_bsd", "mean_queue_time_h"]),
              caption="Performance: utilization, mean wait (h) and bounded slowdown of completed jobs, "
                      "mean queue time of all jobs (h)")
    rep.table(summary(df[df.mechanism.isin(["ees", "relaxed-ees", "relaxed-ees-fixed"])], D_MAX,
                      ["revenue", "payment_volume", "mean_payment_run", "mean_payment_discarded", "decisions",
                       "mean_queue_len", "max_queue_len"]),
              caption="Payments (revenue = sum of payments = budget imbalance; volume = sum of |payments|; "
                      "mean total payment of jobs that ran and of discarded jobs, > 0 pays) and decisions "
                      "(queue length I at a decision)")
    best_blind = "easy" if m("easy", "utility_per_job") >= m("fcfs", "utility_per_job") else "fcfs"
    gain = paired_gain(df, "relaxed-ees", best_blind, D_MAX)
    pr, pd_ = m("relaxed-ees", "mean_payment_run"), m("relaxed-ees", "mean_payment_discarded")
    rep.text(f"""
Findings at d_max = {D_MAX:g} (means over seeds):

* Realised utility per job: EES {m('ees', 'utility_per_job'):.1f}, relaxed EES {m('relaxed-ees', 'utility_per_job'):.1f}
  (fixed commitments {m('relaxed-ees-fixed', 'utility_per_job'):.1f}), FCFS {m('fcfs', 'utility_per_job'):.1f},
  EASY {m('easy', 'utility_per_job'):.1f}. Relaxed EES minus {LABELS[best_blind]} (the better value-blind
  baseline), paired over seeds: {gain.text('+.2f')} per job (95% interval).
* The full-width EES runs one job at a time on a {meta['capacity']}-node machine: utilization
  {m('ees', 'utilization'):.3f} (EASY {m('easy', 'utilization'):.3f}); it discards
  {100 * m('ees', 'discard_rate'):.0f}% of the jobs and realises {100 * m('ees', 'value_realised_share'):.0f}% of
  the total value; mean queue length at a decision {m('ees', 'mean_queue_len'):.1f}; its completed jobs wait
  {m('ees', 'mean_wait_h'):.2f} h on average, all jobs {m('ees', 'mean_queue_time_h'):.2f} h.
* The relaxed EES discards {100 * m('relaxed-ees', 'discard_rate'):.1f}% of the jobs, at utilization
  {m('relaxed-ees', 'utilization'):.3f}; its completed jobs wait {m('relaxed-ees', 'mean_wait_h'):.2f} h
  (EASY {m('easy', 'mean_wait_h'):.2f} h, FCFS {m('fcfs', 'mean_wait_h'):.2f} h), bounded slowdown
  {m('relaxed-ees', 'mean_bsd'):.1f} (EASY {m('easy', 'mean_bsd'):.1f}, FCFS {m('fcfs', 'mean_bsd'):.1f}).
  With commitments kept fixed after early ends: utilization {m('relaxed-ees-fixed', 'utilization'):.3f},
  wait {m('relaxed-ees-fixed', 'mean_wait_h'):.2f} h.
* Payments balance at every decision (relaxed EES: revenue {m('relaxed-ees', 'revenue'):.2g} against a volume
  of {m('relaxed-ees', 'payment_volume'):.3g}). Under the relaxed EES jobs that ran {_pays(pr)} and discarded
  jobs {_pays(pd_)} on average over their lives (the thesis: discarded jobs gain currency, jobs that run
  lose it). Utility is not individually rational: {100 * m('relaxed-ees', 'negative_utility_share'):.0f}% of
  the jobs end with negative utility under the relaxed EES (EES {100 * m('ees', 'negative_utility_share'):.0f}%,
  EASY {100 * m('easy', 'negative_utility_share'):.0f}%).

Caveats: wait and slowdown cover completed jobs only, so a mechanism that discards the jobs that
would wait longest looks better on them; the queue time of all jobs and the utility account for
the discarded jobs. Values are independent of job size (one prior for all jobs, as the mechanism
assumes), so discarding a long job loses no more value than discarding a short one; values that
grow with job size are not modelled.
""")
    rep.heading("Sensitivity to the delay-cost scale")
    rep.figure(fig_sensitivity(df), "sensitivity",
               caption="Mean over seeds against d_max (log scale; error bars: 95% t-interval over seeds); "
                       "v ~ U(0, 100) throughout")
    sens = (df[df.mechanism.isin(["fcfs", "easy", "ees", "relaxed-ees"])]
            .groupby(["d_max", "mechanism"], sort=False)[["utility_per_job", "discard_rate", "utilization",
                                                           "mean_queue_time_h"]].mean().reset_index())
    sens["mechanism"] = sens["mechanism"].map(LABELS)
    rep.table(sens, caption="Means over seeds per d_max")
    fcfs_u = df[df.mechanism == "fcfs"].groupby("d_max")["utility_per_job"].mean()
    lines = []
    for dm in D_MAX_SWEEP:
        g = paired_gain(df, "relaxed-ees", "easy", dm)
        ge = paired_gain(df, "ees", "easy", dm)
        sub = df[df.d_max == dm]
        dr = {k: 100 * float(sub[sub.mechanism == k]["discard_rate"].mean()) for k in ("ees", "relaxed-ees")}
        lines.append(f"* d_max = {dm:g}: relaxed EES minus EASY {g.text('+.2f')}, EES minus EASY "
                     f"{ge.text('+.2f')} per job (paired over seeds, 95% intervals); discards EES {dr['ees']:.1f}%, "
                     f"relaxed EES {dr['relaxed-ees']:.1f}%; FCFS utility {fcfs_u[dm]:.1f}")
    rep.text("The schedules of FCFS and EASY do not depend on values, so their utility falls linearly in "
             "d_max; the EES variants discard more as d_max grows (the run threshold b = sum d x delay "
             "rises).\n\n" + "\n".join(lines))
    rep.heading(f"Per-job view (seed {seeds[0]}, d_max = {D_MAX:g})")
    rep.figure(fig_jobs(jobs, dec), "jobs",
               caption="Left: CDF of per-job realised utility. Middle: total payment per job by final state "
                       "(boxes without outliers). Right: queue length I at each decision")
    c = V.Claims("Our comparisons", ours=True)
    for mech, where in (("ees", "Sec. 4.1"), ("relaxed-ees", "Sec. 6.1")):
        g = main[main.mechanism == mech]
        for col, claim, region in (("mean_payment_run", "jobs the mechanism runs lose currency (pay, > 0)",
                                    V.ordering(">")),
                                   ("mean_payment_discarded", "jobs the mechanism discards gain currency overall "
                                    "(receive, < 0)", V.ordering("<"))):
            x = g[col].dropna().to_numpy()
            c.check(where, f"{LABELS[mech]}: {claim}", "run pay > 0" if col.endswith("run") else "discarded < 0",
                    region, V.t_interval(x) if len(x) else None, fmt=".3g",
                    note=f"mean total payment per job over its life, d_max = {D_MAX:g}, {len(x)} seeds")
    for dm in D_MAX_SWEEP:
        c.check(f"d_max = {dm:g}", "relaxed EES realises more utility per job than EASY (ours)", "higher",
                V.ordering(">"), paired_gain(df, "relaxed-ees", "easy", dm), fmt=".3g",
                note=f"paired over {len(seeds)} seeds; not a claim of the thesis")
    rep.claims(c, intro="Not counted: the thesis has no trace-driven numbers. The currency-flow rows are its "
                        "qualitative statements (sections 4.1 and 6.1) checked on a workload it did not run; the "
                        "utility rows are our own question. Judged by the same rule, on the per-seed means "
                        "(95% t-interval over seeds).")
