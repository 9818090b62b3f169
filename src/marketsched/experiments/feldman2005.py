"""Reproduction of Feldman, Lai & Zhang (2005), sections 3 and 5, figures 3-7.

Grid (section 5 and 5.1-5.2): n = 100 machines; m users from 5 to 150; uniform preferences
(w_ij ~ U(0, 1), normalised) and correlated ones (3-dimensional profiles, normalised); budgets
1; weight-proportional start; best-response dynamics (sequential updates, eps = 0.001, cap 200
iterations) and local greedy adjustment (cap 500); finite parallelism Delta in {5, 20} with the
local-search best response (uniform preferences only, as the paper). Baselines: social optimum
and weight-proportional bids. Each cell is one (preferences, m, seed) instance; the best-response
and greedy runs and both baselines share the instance (common random numbers).

Added to test the paper's analytic claims and its floors, which are defined over *all*
equilibria (section 2: pi(Q), tau(Q), rho(Q) are minima over the equilibrium set): every
infinite-parallelism instance is also played by best response from ``STARTS`` random starting
bids (Dirichlet(1) splits of the budget), and the minimum efficiency, uniformity and
envy-freeness over the equilibria reached is stored; random two-player games (Theorem 2) are
played from the weight-proportional and random starts; the closed-form examples of section 3
(equal- and opposite-weight games, the worst-case instance of Theorem 3) are evaluated exactly
when the report is written.

What the paper leaves open and is decided here: random seeds and repetitions (5 seeds for the infinite model, 3 for the
finite one), reserve bid 1e-6 (appendix A), sequential update order, greedy step 1% of the
budget with a 5% marginal-gap threshold, "the minimum value we observe after running for many
iterations" read as the minimum over the second half of a non-converged run, one local-search
"iteration" read as one pass that ends in a swap or at the local maximum (so "two iterations"
is at most one swap).

Steps: :func:`run` simulates and stores per-instance rows in ``OUT/results`` (``infinite.csv``,
``finite.csv``, ``two_player.csv``, ``meta.json``); :func:`write_report` reads only those files
and writes ``report.md``, the figures and ``claims.csv`` (every claim of the paper with our
figure, its 95% interval and the verdict of :mod:`marketsched.analysis.verdicts`).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from marketsched.analysis import verdicts as V
from marketsched.experiments.report import Report
from marketsched.experiments.tasks import Task, run_tasks
from marketsched.mechanisms.games.dynamics import regrets, run_dynamics
from marketsched.mechanisms.games.fixed_budget import (
    FixedBudgetGame,
    correlated_game,
    equal_weight_game,
    opposite_equilibria,
    opposite_weight_game,
    shares_of,
    uniform_game,
    weight_proportional_bids,
    worst_case_game,
)
from marketsched.mechanisms.games.metrics import evaluate, social_optimum

NAME = "feldman2005"
TITLE = "Feldman, Lai & Zhang (2005): Tycoon fixed-budget proportional-share game (sections 3 and 5, figures 3-7)"
QUICK_TIME = "~25 s"  # CPU time of --quick (user + system, all processes), measured

N_MACHINES = 100
PREFS = {"uniform": 0, "correlated": 1}
STARTS = 8  # random starting points per infinite-parallelism instance (besides weight-proportional)
TWO_PLAYER_MACHINES = (2, 3, 5, 10)
TWO_PLAYER_RESERVE = 1e-9
TWO_PLAYER_REGRET = 1e-5  # a run whose largest regret is below this counts as an equilibrium


def _game(pref: str, m: int, seed: int, parallelism=None):
    rng = np.random.default_rng([seed, m, PREFS[pref], 0 if parallelism is None else int(parallelism)])
    make = uniform_game if pref == "uniform" else correlated_game
    return make(m, N_MACHINES, rng, parallelism=parallelism)


def _random_starts(game: FixedBudgetGame, rng: np.random.Generator, k: int) -> list[np.ndarray]:
    """``k`` random bid matrices: each user splits its budget by a Dirichlet(1) draw over all machines."""
    return [rng.dirichlet(np.ones(game.n), size=game.m) * game.budgets[:, None] for _ in range(k)]


def infinite_cell(pref: str, m: int, seed: int, greedy_cap: int, keep_trace: bool, starts: int) -> dict:
    """One instance of section 5.1: best response (weight-proportional and random starts), greedy, baselines."""
    g = _game(pref, m, seed)
    t0 = time.perf_counter()
    br = run_dynamics(g)
    br_seconds = time.perf_counter() - t0
    gr = run_dynamics(g, method="greedy", max_iterations=greedy_cap)
    opt, so_shares = social_optimum(g)
    so = evaluate(g, so_shares, opt)
    wp = evaluate(g, shares_of(weight_proportional_bids(g), g.reserve), opt)
    rng = np.random.default_rng([seed, m, PREFS[pref], 7])
    ms = [run_dynamics(g, initial=x0) for x0 in _random_starts(g, rng, starts)]
    eff = [r.efficiency[-1] for r in ms] + [br.efficiency[-1]]
    row = {
        "pref": pref, "m": m, "seed": seed,
        "br_converged": br.converged, "br_iterations": br.iterations, "br_seconds": br_seconds,
        "ne_efficiency": br.efficiency[-1], "ne_uniformity": br.uniformity[-1], "ne_envy": br.envy_freeness[-1],
        "ne_min_utility_m": float(br.utilities.min() * m),
        "gr_converged": gr.converged, "gr_iterations": gr.iterations, "gr_stabilised": gr.stabilised_at,
        "gr_efficiency": gr.efficiency[-1],
        "wp_efficiency": wp["efficiency"], "wp_uniformity": wp["uniformity"], "wp_envy": wp["envy_freeness"],
        "so_uniformity": so["uniformity"], "so_envy": so["envy_freeness"],
        "ms_starts": starts + 1, "ms_converged": sum(r.converged for r in ms) + br.converged,
        "ms_eff_min": min(eff), "ms_eff_max": max(eff),
        "ms_uni_min": min([r.uniformity[-1] for r in ms] + [br.uniformity[-1]]),
        "ms_envy_min": min([r.envy_freeness[-1] for r in ms] + [br.envy_freeness[-1]]),
        "ms_min_utility_m": float(min(r.utilities.min() for r in ms + [br]) * m),
        "ms_distinct": len({round(e, 3) for e in eff}),
        "ms_max_iterations": max(r.iterations for r in ms),
    }
    if keep_trace:
        row["trace_br"] = br.efficiency.tolist()
        row["trace_gr"] = gr.efficiency.tolist()
    return row


#: Greedy adjustment variants (money moved per step as a share of the budget, marginal-gap threshold) run to test
#: whether the greedy claims hinge on those unstated choices; the default (0.01, 0.05) is the main run's.
GREEDY_VARIANTS = ((0.005, 0.05), (0.02, 0.05), (0.01, 0.02), (0.01, 0.10))
GREEDY_VARIANT_USERS = (20, 40, 60, 100)
#: Section 5.1: the equilibrium's efficiency is "about 50%" (uniform) and "about 30%" (correlated) above
#: the weight-proportional baseline's.
PAPER_GAIN = {"uniform": 50, "correlated": 30}


def _raw_weights(pref: str, m: int, seed: int) -> np.ndarray:
    """The weights of :func:`_game`'s instance before the per-user normalisation (the same draws)."""
    rng = np.random.default_rng([seed, m, PREFS[pref], 0])
    if pref == "uniform":
        return rng.random((m, N_MACHINES))
    p = rng.random((m, 3))
    return p @ rng.random((N_MACHINES, 3)).T


def baseline_cell(pref: str, m: int, seed: int) -> dict:
    """Ours: an instance of section 5.1 with the weights *not* normalised per user (the paper does not say
    whether its weight-proportional baseline normalises them): equilibrium and weight-proportional efficiency."""
    normalised = _game(pref, m, seed)
    w = _raw_weights(pref, m, seed)
    if not np.allclose(w / w.sum(axis=1, keepdims=True), normalised.weights):
        raise AssertionError("feldman2005: the raw weights are not the normalised game's draws")
    g = FixedBudgetGame(w, np.ones(m), None, normalised.reserve)
    br = run_dynamics(g)
    opt, _ = social_optimum(g)
    wp = evaluate(g, shares_of(weight_proportional_bids(g), g.reserve), opt)
    return {"pref": pref, "m": m, "seed": seed, "raw_converged": br.converged,
            "raw_ne_efficiency": br.efficiency[-1], "raw_wp_efficiency": wp["efficiency"]}


def greedy_cell(pref: str, m: int, seed: int, step: float, gap: float, cap: int) -> dict:
    """Ours: greedy adjustment (section 4.3) with another step size or marginal-gap threshold."""
    gr = run_dynamics(_game(pref, m, seed), method="greedy", max_iterations=cap, greedy_step=step, marginal_tol=gap)
    return {"pref": pref, "m": m, "seed": seed, "greedy_step": step, "marginal_gap": gap, "converged": gr.converged,
            "iterations": gr.iterations, "stabilised": gr.stabilised_at, "efficiency": gr.efficiency[-1]}


def explanation_tasks(users, n_seeds: int, greedy_cap: int, quick: bool) -> list[Task]:
    """The tasks of :func:`baseline_cell` and :func:`greedy_cell` for a run's grid."""
    variants = GREEDY_VARIANTS[:2] if quick else GREEDY_VARIANTS
    return ([Task(("baseline", pref, m, s), baseline_cell, (pref, m, s))
             for pref in PREFS for m in users for s in range(n_seeds)]
            + [Task(("greedy", pref, m, s, step, gap, greedy_cap), greedy_cell, (pref, m, s, step, gap, greedy_cap))
               for pref in PREFS for m in ((20, 100) if quick else GREEDY_VARIANT_USERS) for s in range(n_seeds)
               for step, gap in variants])


def store_explanations(rows: list[dict], res: Path) -> list[dict]:
    """Write the rows of :func:`explanation_tasks` to ``res`` (``baseline.csv``, ``greedy_variants.csv``);
    return the other rows."""
    res.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([r for r in rows if "raw_ne_efficiency" in r]).sort_values(["pref", "m", "seed"]).to_csv(
        res / "baseline.csv", index=False)
    pd.DataFrame([r for r in rows if "greedy_step" in r]).sort_values(
        ["pref", "greedy_step", "marginal_gap", "m", "seed"]).to_csv(res / "greedy_variants.csv", index=False)
    return [r for r in rows if "raw_ne_efficiency" not in r and "greedy_step" not in r]


def finite_cell(delta: int, m: int, seed: int, cap: int, keep_trace: bool) -> dict:
    """One instance of section 5.2 (uniform preferences, local-search best response)."""
    g = _game("uniform", m, seed, parallelism=delta)
    t0 = time.perf_counter()
    res = run_dynamics(g, max_iterations=cap)
    seconds = time.perf_counter() - t0
    if res.converged:
        eff, uni, env = res.efficiency[-1], res.uniformity[-1], res.envy_freeness[-1]
    else:   # "the minimum value we observe after running for many iterations": second half
        half = slice(len(res.efficiency) // 2, None)
        eff, uni, env = res.efficiency[half].min(), res.uniformity[half].min(), res.envy_freeness[half].min()
    swaps = np.asarray(res.swaps, dtype=int)
    row = {
        "delta": delta, "m": m, "seed": seed, "ratio": m * delta / N_MACHINES,
        "converged": res.converged, "iterations": res.iterations, "seconds": seconds,
        "efficiency": eff, "uniformity": uni, "envy": env, "final_efficiency": res.efficiency[-1],
        "efficiency_after_5": float(res.efficiency[min(5, len(res.efficiency) - 1):].min()),
        "calls": int(swaps.size), "calls_at_most_1_swap": int((swaps <= 1).sum()),
        "swaps_mean": float(swaps.mean()) if swaps.size else 0.0,
        "swaps_max": int(swaps.max()) if swaps.size else 0,
    }
    if keep_trace:
        row["trace"] = res.efficiency.tolist()
    return row


def two_player_cell(n: int, seed: int, starts: int) -> list[dict]:
    """Theorem 2: a random two-player game (uniform weights over ``n`` machines) from several starts.

    Sequential best response can cycle in these games (for example weights (0.67, 0.33) and
    (0.96, 0.04): a 3-cycle), so they are played by damped simultaneous best response
    (damping 0.9, utility gap 1e-12, at most 5000 rounds); a run counts as an equilibrium when
    its largest regret is below ``TWO_PLAYER_REGRET``.
    """
    rng = np.random.default_rng([seed, n, 2])
    g = uniform_game(2, n, rng, reserve=TWO_PLAYER_RESERVE)
    rows = []
    starts_: list[np.ndarray | None] = [None, *_random_starts(g, rng, starts)]
    for k, x0 in enumerate(starts_):
        r = run_dynamics(g, initial=x0, tol=1e-12, max_iterations=5000, order="simultaneous", damping=0.9)
        ev = evaluate(g, shares_of(r.bids, 0.0))  # measured on x/Y: the reserve only guards the dynamics
        rows.append({"n": n, "seed": seed, "start": k, "converged": r.converged, "iterations": r.iterations,
                     "regret": float(regrets(g, r.bids).max()), "efficiency": ev["efficiency"],
                     "uniformity": ev["uniformity"], "envy": ev["envy_freeness"]})
    return rows


def run(out_dir, quick: bool = False, seeds: int | None = None, workers: int | None = None,
        executor: str = "process") -> Path:
    """Run the grid (resuming from ``out_dir/tasks``), store the rows in ``out_dir/results``, write the report."""
    out_dir = Path(out_dir)
    n_seeds = seeds or (2 if quick else 5)
    finite_seeds = min(n_seeds, 2 if quick else 3)
    users = [5, 20, 40, 100] if quick else [5, 10, 20, 30, 40, 60, 80, 100, 150]
    finite_users = [5, 10, 20, 60] if quick else [5, 10, 15, 20, 30, 40, 60, 100, 150]
    greedy_cap = 200 if quick else 500
    finite_cap = 30 if quick else 200
    starts = 2 if quick else STARTS
    two_games = 10 if quick else 100
    trace_m = 40
    trace_finite = {(5, 30), (20, 10), (5, 60)}

    # a task's key is its part and its arguments
    tasks = [Task(("infinite", *a), infinite_cell, a) for a in
             ((pref, m, s, greedy_cap, s == 0 and m == trace_m, starts)
              for pref in PREFS for m in users for s in range(n_seeds))]
    tasks += [Task(("finite", *a), finite_cell, a) for a in
              ((d, m, s, finite_cap, s == 0 and (d, m) in trace_finite)
               for d in (5, 20) for m in finite_users for s in range(finite_seeds))]
    tasks += explanation_tasks(users, n_seeds, greedy_cap, quick)
    tasks.sort(key=lambda t: -(int(t.args[1]) * (int(t.args[0]) if t.fn is finite_cell else 1)))  # big cells first
    tasks += [Task(("two_player", n, s, 2), two_player_cell, (n, s, 2))
              for n in TWO_PLAYER_MACHINES for s in range(two_games)]
    workers = workers or max(1, min(os.cpu_count() or 1, 2))
    t0 = time.perf_counter()
    rows = run_tasks(tasks, out_dir / "tasks", executor, workers, description="feldman2005 cells").values()
    wall = time.perf_counter() - t0
    two = pd.DataFrame([r for batch in rows if isinstance(batch, list) for r in batch]).sort_values(["n", "seed", "start"])
    rows = store_explanations([r for r in rows if isinstance(r, dict)], out_dir / "results")
    inf = pd.DataFrame([r for r in rows if "pref" in r]).sort_values(["pref", "m", "seed"])
    fin = pd.DataFrame([r for r in rows if "delta" in r]).sort_values(["delta", "m", "seed"])
    res = out_dir / "results"
    res.mkdir(parents=True, exist_ok=True)
    inf.drop(columns=[c for c in inf.columns if c.startswith("trace")]).to_csv(res / "infinite.csv", index=False)
    fin.drop(columns=[c for c in fin.columns if c.startswith("trace")]).to_csv(res / "finite.csv", index=False)
    two.to_csv(res / "two_player.csv", index=False)
    meta = {"quick": quick, "seeds": n_seeds, "finite_seeds": finite_seeds, "users": users,
            "finite_users": finite_users, "greedy_cap": greedy_cap, "finite_cap": finite_cap, "trace_m": trace_m,
            "starts": starts, "two_player_games": two_games, "cells": len(tasks), "workers": workers,
            "wall_seconds": round(wall, 1), "load_average": round(os.getloadavg()[0], 1),
            "traces_infinite": {r["pref"]: {"best_response": r["trace_br"], "greedy": r["trace_gr"]}
                                for r in rows if "trace_br" in r},
            "traces_finite": [{"delta": r["delta"], "m": r["m"], "efficiency": r["trace"]}
                              for r in rows if "trace" in r]}
    (res / "meta.json").write_text(json.dumps(meta))
    return write_report(res, out_dir)


# ------------------------------------------------------------------------------ figures
def _band(ax, df: pd.DataFrame, x: str, y: str, label: str, style: str = "-o", log: bool = False):
    """Mean over seeds with its 95% t-interval as a shaded band; ``log``: geometric mean and the
    t-interval of the log values (positive, asymmetric; stays meaningful on a log axis)."""
    xs, mean, lo, hi = [], [], [], []
    for xv, vals in df.groupby(x)[y]:
        v = vals.to_numpy(dtype=float)
        iv = V.t_interval(np.log(v) if log else v)
        f = np.exp if log else (lambda z: z)
        xs.append(xv)
        mean.append(f(iv.estimate))
        lo.append(f(iv.lo))
        hi.append(f(iv.hi))
    line, = ax.plot(xs, mean, style, label=label, ms=3)
    ax.fill_between(xs, lo, hi, alpha=0.15, color=line.get_color(), lw=0)


BAND = ("Lines: mean over seeds; shaded: its 95% Student-t interval over seeds (iteration panels, log axis: "
        "geometric mean and the t-interval of log iterations, so the band stays positive).")


def write_report(results, out_dir=None) -> Path:
    """(Re)write ``report.md``, ``claims.csv`` and the figures from the files ``run`` stored in ``results``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = Path(results)
    out_dir = Path(out_dir) if out_dir is not None else results.parent
    inf = pd.read_csv(results / "infinite.csv")
    fin = pd.read_csv(results / "finite.csv")
    two = pd.read_csv(results / "two_player.csv")
    meta = json.loads((results / "meta.json").read_text())
    traces_inf = {pref: (t["best_response"], t["greedy"]) for pref, t in meta["traces_infinite"].items()}
    traces_fin = {(t["delta"], t["m"]): t["efficiency"] for t in meta["traces_finite"]}

    rep = Report(out_dir, TITLE)
    # the docstring names the constant; the report gives the run's own count
    rep.text(__doc__.split("\n", 2)[2].split("\nSteps:")[0].replace("``STARTS``", str(meta["starts"])))
    rep.text(f"Run: {'quick' if meta['quick'] else 'full'} grid, {meta['seeds']} seeds (finite model: "
             f"{meta['finite_seeds']}), users {meta['users']} (finite: {meta['finite_users']}), greedy cap "
             f"{meta['greedy_cap']}, finite cap {meta['finite_cap']} iterations, {meta['starts']} random starts per "
             f"instance, {meta['two_player_games']} two-player games per machine count "
             f"{list(TWO_PLAYER_MACHINES)}; {meta['cells']} tasks in {meta['wall_seconds']:.0f} s wall time "
             f"({meta['workers']} worker processes on a shared 2-core machine, load average {meta['load_average']} at "
             "the end). Stored results: `results/` (`infinite.csv`, `finite.csv`, `two_player.csv`, `meta.json`); "
             f"`marketsched reproduce {NAME} --report-only --results results` rewrites this report from them.")

    # ---------------------------------------------------------------- figure 3 ----------
    fig, axes = plt.subplots(4, 2, figsize=(7, 8.5), sharex=True)
    for col, pref in enumerate(PREFS):
        d = inf[inf.pref == pref]
        ax = axes[0, col]
        _band(ax, d, "m", "br_iterations", "best response: convergence", log=True)
        _band(ax, d, "m", "gr_iterations", f"greedy: convergence (cap {meta['greedy_cap']})", log=True)
        _band(ax, d.assign(gr_stabilised=d.gr_stabilised.clip(lower=1)), "m", "gr_stabilised",
              "greedy: welfare stabilisation", "--s", log=True)
        ax.set_yscale("log")
        ax.set_ylabel("iterations")
        ax.set_title(f"{pref} preferences")
        for row, (key, label) in enumerate([("efficiency", "efficiency"), ("uniformity", "utility uniformity"),
                                            ("envy", "envy-freeness")], start=1):
            ax = axes[row, col]
            _band(ax, d, "m", f"ne_{key}", "Nash equilibrium (weight-proportional start)")
            _band(ax, d, "m", {"efficiency": "ms_eff_min", "uniformity": "ms_uni_min", "envy": "ms_envy_min"}[key],
                  f"worst of {meta['starts'] + 1} starts", ":x")
            _band(ax, d, "m", f"wp_{key}", "weight-proportional", "--s")
            if key == "efficiency":
                ax.axhline(1.0, color="k", lw=0.8, label="social optimum")
            else:
                _band(ax, d, "m", f"so_{key}", "social optimum", ":^")
            ax.set_ylabel(label)
        axes[-1, col].set_xlabel("number of users m")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=6)
    axes[1, 0].legend(fontsize=6)
    fig.tight_layout()
    rep.heading("Infinite parallelism (section 5.1)")
    rep.figure(fig, "fig3_infinite", "Figure 3: convergence time (a, b), efficiency (c, d), utility uniformity (e, f) "
               "and envy-freeness (g, h) against m; uniform left, correlated right; n = 100. " + BAND)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for pref, (tb, tg) in traces_inf.items():
        ax.plot(range(len(tb)), tb, "-o", ms=3, label=f"best response ({pref})")
        ax.plot(range(len(tg)), tg, "-", label=f"greedy ({pref})")
    ax.set_xscale("symlog")
    ax.set_xlabel("iteration")
    ax.set_ylabel("efficiency")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    rep.figure(fig, "fig4_efficiency_over_time",
               f"Figure 4: efficiency over iterations, m = {meta['trace_m']}, n = 100, seed 0 (single runs, no band).")

    summary = inf.groupby(["pref", "m"]).agg(
        br_it_mean=("br_iterations", "mean"), br_it_max=("br_iterations", "max"), br_conv=("br_converged", "mean"),
        ne_eff=("ne_efficiency", "mean"), ne_uni=("ne_uniformity", "mean"), ne_envy=("ne_envy", "mean"),
        ms_eff_min=("ms_eff_min", "mean"), ms_distinct=("ms_distinct", "mean"),
        wp_eff=("wp_efficiency", "mean"), wp_uni=("wp_uniformity", "mean"),
        so_uni=("so_uniformity", "mean"), so_envy=("so_envy", "mean"), gr_conv=("gr_converged", "mean"),
        gr_it=("gr_iterations", "mean"), gr_stab=("gr_stabilised", "mean"), gr_eff=("gr_efficiency", "mean"),
    ).reset_index()
    summary["gain_over_wp_%"] = 100 * (summary.ne_eff / summary.wp_eff - 1)
    rep.table(summary, caption="Infinite parallelism: means over seeds (conv = fraction of runs converged; ms_eff_min: "
                               "worst efficiency over the random starts; ms_distinct: distinct equilibria reached, "
                               "by welfare at 3 decimals)", floatfmt=".3g")

    # ---------------------------------------------------------------- finite ------------
    fig, axes = plt.subplots(1, 4, figsize=(12, 2.8))
    for delta in (5, 20):
        d = fin[fin.delta == delta]
        _band(axes[0], d, "m", "iterations", f"Δ = {delta}", log=True)
        for ax, key in zip(axes[1:], ("efficiency", "uniformity", "envy")):
            _band(ax, d, "m", key, f"Δ = {delta}")
    for ax, label in zip(axes, ("iterations (cap = non-convergence)", "efficiency", "utility uniformity", "envy-freeness")):
        ax.set_xlabel("number of users m")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_yscale("log")
    fig.tight_layout()
    rep.heading("Finite parallelism (section 5.2)")
    rep.figure(fig, "fig5_fig7_finite", "Figures 5 and 7: convergence time, efficiency, utility uniformity and "
               "envy-freeness with at most Δ machines per user (uniform preferences, n = 100). Non-converged runs "
               f"show the minimum over the second half of the run. {BAND} With {meta['finite_seeds']} seeds the "
               "t-intervals are wide.")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for (delta, m), tr in sorted(traces_fin.items()):
        ax.plot(range(len(tr)), tr, label=f"Δ = {delta}, m = {m} (δ = {m * delta / N_MACHINES:g})")
    ax.set_xlabel("iteration")
    ax.set_ylabel("efficiency")
    ax.set_xscale("symlog")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    rep.figure(fig, "fig6_finite_over_time", "Figure 6: efficiency over iterations under finite parallelism, seed 0 "
                                              "(single runs, no band).")
    fsum = fin.groupby(["delta", "m"]).agg(
        ratio=("ratio", "first"), conv=("converged", "mean"), it=("iterations", "mean"), eff=("efficiency", "mean"),
        uni=("uniformity", "mean"), envy=("envy", "mean"), swaps_mean=("swaps_mean", "mean"),
        swaps_max=("swaps_max", "max"), seconds=("seconds", "mean")).reset_index()
    rep.table(fsum, caption="Finite parallelism: means over seeds (ratio = δ = mΔ/n; conv = fraction converged)",
              floatfmt=".3g")

    eq = two[two.regret <= TWO_PLAYER_REGRET]
    two_sum = two.groupby("n").agg(games=("seed", "nunique"), runs=("start", "size"), converged=("converged", "mean"),
                                   equilibria=("regret", lambda r: int((r <= TWO_PLAYER_REGRET).sum())),
                                   max_regret=("regret", "max")).reset_index().merge(
        eq.groupby("n").agg(min_eff=("efficiency", "min"), min_uni=("uniformity", "min"),
                            min_envy=("envy", "min")).reset_index(), on="n", how="left")
    rep.heading("Two-player games (Theorem 2)")
    rep.table(two_sum, caption="Random two-player games (uniform weights over n machines), damped simultaneous best "
                               "response from the weight-proportional start and 2 random starts; worst of the runs that "
                               f"reached an equilibrium (largest regret <= {TWO_PLAYER_REGRET:g})", floatfmt=".4g")

    # ---------------------------------------------------------------- claims ------------
    paper, ours = claims(inf, fin, two, meta)
    rep.claims(paper, intro="Every quantitative statement of the paper, in order of appearance; figures with their "
                            "95% interval over seeds (infinite model: 5 games per m; finite: "
                            f"{meta['finite_seeds']}); a claim about every m takes the worst verdict over m.")
    rep.claims(ours)
    tested = _explanations(rep, results, inf)
    rep.text(_discussion(summary, inf, fsum, tested))
    return rep.write()


def _explanations(rep: Report, results: Path, inf: pd.DataFrame) -> dict:
    """Ours: the two explanations the discussion would otherwise leave open, each run (when its stored
    results exist): the weights not normalised per user, and other greedy step sizes and thresholds."""
    out: dict = {}
    if not (results / "baseline.csv").is_file() or not (results / "greedy_variants.csv").is_file():
        return out
    rep.heading("Explanations tested (ours: not counted)")
    b = pd.read_csv(results / "baseline.csv")
    b["raw_gain_%"] = 100 * (b.raw_ne_efficiency / b.raw_wp_efficiency - 1)
    norm = inf.assign(**{"gain_%": 100 * (inf.ne_efficiency / inf.wp_efficiency - 1)})
    t = (b.groupby(["pref", "m"])["raw_gain_%"].mean().rename("gain over WP, raw weights (%)").to_frame()
         .join(norm.groupby(["pref", "m"])["gain_%"].mean().rename("gain over WP, normalised (%)"))
         .join(b.groupby(["pref", "m"]).raw_wp_efficiency.mean().rename("WP efficiency, raw weights"))
         .reset_index())
    rep.table(t, caption="The weight-proportional baseline with the weights not normalised per user (the same draws; "
                         "equilibrium and optimum recomputed on the raw weights), mean over the seeds", floatfmt=".3g")
    raw = "gain over WP, raw weights (%)"
    out["raw_gain"] = {p: (g[raw].min(), g[raw].max()) for p, g in t.groupby("pref")}
    out["gain_shift"] = float((t["gain over WP, raw weights (%)"] - t["gain over WP, normalised (%)"]).abs().max())
    # the same rule as the counted claim: is the raw-weight gain "about" the paper's figure at some m?
    out["raw_match"] = {pref: [str(m) for m, g in b[b.pref == pref].groupby("m")
                               if V.judge(V.verbal("about", target), V.t_interval(g["raw_gain_%"].to_numpy()))
                               == V.MATCH]
                        for pref, target in PAPER_GAIN.items()}
    gv = pd.read_csv(results / "greedy_variants.csv")
    default = inf[inf.m.isin(gv.m.unique())].assign(greedy_step=0.01, marginal_gap=0.05, converged=inf.gr_converged,
                                                    stabilised=inf.gr_stabilised)
    both = pd.concat([gv, default[["pref", "m", "seed", "greedy_step", "marginal_gap", "converged", "stabilised"]]])
    agg = both.groupby(["greedy_step", "marginal_gap", "m"]).agg(converged=("converged", "mean"),
                                                                 stabilised=("stabilised", "mean")).reset_index()
    wide = agg.pivot_table(index=["greedy_step", "marginal_gap"], columns="m",
                           values=["converged", "stabilised"]).round(2)
    wide.columns = [f"{'share converged' if col[0] == 'converged' else 'mean stabilised at'}, m={col[1]}"
                    for col in wide.columns]
    rep.table(wide.reset_index(), caption="Greedy adjustment with other step sizes (share of the budget moved per step) "
                                          "and marginal-gap thresholds, both preferences pooled, the main run's "
                                          "iteration cap; the row (0.01, 0.05) is the main run's", floatfmt=".3g")
    holds = []
    for (step, gap), g in agg.groupby(["greedy_step", "marginal_gap"]):
        few, many = g[g.m < 60], g[g.m >= 60]
        if (few.converged == 0).all() and (many.converged == 1).all() and (g.stabilised <= 100).all():
            holds.append(f"({step:g}, {gap:g})")
    out["greedy_holds"] = holds
    out["greedy_depends"] = bool((agg.groupby("m").converged.nunique() > 1).any())
    out["greedy_runs"] = len(gv)
    return out


# ------------------------------------------------------------------------------ claims
def _per(df: pd.DataFrame, by: str, col: str) -> dict:
    return {k: V.t_interval(g[col].to_numpy(dtype=float)) for k, g in df.groupby(by)}


def _all_parts(claims: V.Claims, where: str, claim: str, paper: str, region: V.Region, parts: dict,
               fmt: str = ".3g", label=lambda k: f"m={k}", note: str = "") -> str:
    """One claim over several parts (m values): the worst verdict; our figure names the worst part."""
    if not parts:
        return claims.not_attempted(where, claim, paper, "no cell of this run falls in the claim's range")
    verdicts = {k: V.judge(region, iv) for k, iv in parts.items()}
    worst = V.worst(verdicts.values())
    # show the part that decides the verdict (the worst one, and the lowest estimate among equals)
    key = min((k for k, v in verdicts.items() if v == worst), key=lambda k: parts[k].estimate)
    ours = (f"{label(key)}: {parts[key].text(fmt)}; range of means {min(p.estimate for p in parts.values()):{fmt}}-"
            f"{max(p.estimate for p in parts.values()):{fmt}}")
    counts = {v: sum(x == v for x in verdicts.values()) for v in V.VERDICTS if any(x == v for x in verdicts.values())}
    detail = ", ".join(f"{n} {v}" for v, n in counts.items())
    return claims.add(where, claim, paper, ours, worst, (note + "; " if note else "") + f"parts: {detail}")


def _share(k, n) -> V.Interval:
    return V.wilson_interval(int(k), int(n))


def analytic() -> dict:
    """The closed-form claims of section 3, computed exactly (no sampling)."""
    from scipy.optimize import minimize_scalar

    out: dict[str, Any] = {}
    # equal-weight game: the dynamics from the weight-proportional start, several alpha
    dev, effs = 0.0, []
    for a in (0.2, 0.5, 0.7, 0.9):
        g = equal_weight_game(a)
        r = run_dynamics(g, tol=1e-12)
        ev = evaluate(g, g.shares(r.bids))
        dev = max(dev, float(np.abs(r.bids[:, 0] - a).max()), float(np.abs(r.utilities - 0.5).max()))
        effs += [ev["efficiency"], ev["uniformity"], ev["envy_freeness"]]
    out["equal_dev"], out["equal_min_metric"] = dev, float(min(effs))

    def sym_eff(a):
        g = opposite_weight_game(a)
        bids = np.array([[a, 1 - a], [1 - a, a]])
        return evaluate(g, g.shares(bids))["efficiency"]

    best = minimize_scalar(sym_eff, bounds=(0.5, 0.999), method="bounded", options={"xatol": 1e-10})
    out["sym_min_eff"], out["sym_argmin"] = float(best.fun), float(best.x)
    g = opposite_weight_game(best.x)
    out["sym_regret"] = float(regrets(g, np.array([[best.x, 1 - best.x], [1 - best.x, best.x]])).max())
    lo, hi = 0.8, 0.9  # one nonnegative root at 0.8, three at 0.9: bisect for the first alpha with three
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if len(opposite_equilibria(mid)) == 3 else (mid, hi)
    out["alpha0"] = hi
    a1 = 1 - 1e-7
    g1 = opposite_weight_game(a1)
    b1 = opposite_equilibria(a1)[0][1]
    ev1 = evaluate(g1, g1.shares(b1))
    out["limit_welfare"] = float(g1.utilities(b1).sum())
    out["limit_optimum"] = float(social_optimum(g1)[0])
    out["limit_eff"], out["limit_uni"] = float(ev1["efficiency"]), float(ev1["uniformity"])
    wc = []
    for n in range(1, 7):
        gw, bids = worst_case_game(n)
        wc.append((n, float(regrets(gw, bids).max()), float(gw.utilities(bids).sum()), float(social_optimum(gw)[0])))
    out["worst_case"] = wc
    return out


def claims(inf: pd.DataFrame, fin: pd.DataFrame, two: pd.DataFrame, meta: dict) -> tuple[V.Claims, V.Claims]:
    """Every quantitative claim of the paper (counted) and our own comparisons (not counted)."""
    c = V.Claims("The paper's claims, our figures and verdicts")
    o = V.Claims("Our own comparisons", ours=True)
    a = analytic()
    big_m = max(inf.m)
    # --- section 1 (contributions) and Theorem 3 ------------------------------------------------------------
    wc = a["worst_case"]
    c.check("Sec. 1, 3.2, Thm 3", "efficiency Omega(1/sqrt m), tight: the m = n^2 + n instance is an equilibrium "
            "with welfare < 2 while U* = n", "welfare < 2, U* = n",
            V.bound("<", 2.0, exact=True), V.exact(max(w for _, _, w, _ in wc)), fmt=".4g",
            note=f"n = 1..6: max regret {max(r for _, r, _, _ in wc):.1e}, welfare 2n/(n+1) = "
                 f"{', '.join(f'{w:.3f}' for _, _, w, _ in wc)}, U* = {', '.join(f'{u:g}' for *_, u in wc)}")
    all_u = pd.concat([inf.ne_min_utility_m, inf.ms_min_utility_m])
    n_eq = len(inf) * int(inf.ms_starts.iloc[0])  # equilibria reached, every start of every run
    c.check("Sec. 1, 3.2, Thm 3", "utility uniformity tau(Q) >= 1/m: every user gets at least 1/m at an equilibrium",
            "m min_i U_i >= 1", V.bound(">=", 1.0, exact=True), V.exact(float(all_u.min())), fmt=".4g",
            instances=n_eq, note=f"smallest m x min_i U_i over the {n_eq} equilibria reached (all starts)")
    envy_all = pd.concat([inf.ne_envy, inf.ms_envy_min])
    c.check("Sec. 1, 3.2, Thm 3", "envy-freeness rho(Q) >= 2 sqrt 2 - 2 ~ 0.83", ">= 0.828",
            V.bound(">=", 2 * math.sqrt(2) - 2, exact=True), V.exact(float(envy_all.min())), fmt=".4g",
            instances=n_eq, note="smallest envy-freeness over every equilibrium reached (all starts)")
    floor_parts = {}
    for key, printed, label in (("efficiency", "0.90", "efficiency"), ("uniformity", "0.65", "utility uniformity"),
                                ("envy", "0.97", "envy-freeness")):
        parts = {(p, m): V.t_interval(g[f"ne_{key}"].to_numpy()) for (p, m), g in inf.groupby(["pref", "m"])}
        floor_parts[key] = parts
        _all_parts(c, "Sec. 1", f"{label} >= {printed}, independent of the number of users (equilibrium reached "
                   "by best response from the weight-proportional start; both preference models)",
                   f">= {printed}", V.bound(">=", printed), parts, label=lambda k: f"{k[0]} m={k[1]}")
    parts = {(p, m): V.t_interval(g.br_iterations.to_numpy(dtype=float)) for (p, m), g in inf.groupby(["pref", "m"])}
    _all_parts(c, "Sec. 1, 5.1 (Fig. 3a,b)", "best response converges within <= 5 iterations (\"within a few "
               "iterations for any number of users\")", "<= 5", V.bound("<=", "5"), parts,
               label=lambda k: f"{k[0]} m={k[1]}",
               note=f"{(inf.br_iterations <= 5).mean():.0%} of single runs within 5; all converged: "
                    f"{bool(inf.br_converged.all())}")
    conv = inf[inf.m >= 60]
    _all_parts(c, "Sec. 1", "local adjustment performs similarly (to best response) when there is sufficient "
               "competitiveness (read: efficiency almost the same where greedy converges, m >= 60)",
               "almost the same", V.verbal("almost the same"),
               {(p, m): V.relative_paired_interval(g.gr_efficiency, g.ne_efficiency)
                for (p, m), g in conv.groupby(["pref", "m"])}, fmt=".2%", label=lambda k: f"{k[0]} m={k[1]}")
    _all_parts(c, "Sec. 1", "local adjustment takes 25 to 90 iterations to stabilise", "25-90",
               V.Region(24.5, 90.5, True),
               {(p, m): V.t_interval(g.gr_stabilised.to_numpy(dtype=float)) for (p, m), g in inf.groupby(["pref", "m"])},
               label=lambda k: f"{k[0]} m={k[1]}")
    # Theorem 1 (existence, for every strongly competitive game): a converged best-response run exhibits an
    # equilibrium of its game; a run that does not converge would not refute the theorem, only leave it untested
    n_conv = int(inf.br_converged.sum())
    c.add("Sec. 2, Thm 1", "a pure strategy Nash equilibrium exists in every strongly competitive game",
          "exists", f"best response reached one in {n_conv} of {len(inf)} games ({len(inf)} instances)",
          V.Verdict(V.NOT_REFUTED, V.MATCH) if n_conv == len(inf) else V.NOT_ATTEMPTED,
          "uniform and correlated games of the grid (strongly competitive: every machine valued by at least two "
          "users); not refuted only when every run converged")
    # --- section 3.1 (two players) ----------------------------------------------------------------------------
    c.check("Sec. 3.1 (Fig. 1a)", "equal-weight game: unique equilibrium x = y = alpha, each utility 1/2, "
            "efficiency = uniformity = envy-freeness = 1", "U_i = 1/2; pi = tau = rho = 1",
            V.value(1.0, exact=True), V.exact(a["equal_min_metric"]), fmt=".6g",
            note=f"alpha = 0.2, 0.5, 0.7, 0.9: largest |x - alpha|, |U_i - 1/2| = {a['equal_dev']:.1e}; smallest of "
                 "pi, tau, rho shown")
    c.check("Sec. 3.1 (Fig. 1b)", "opposite-weight game, symmetric equilibrium: U/U* = 2 alpha + 1/alpha - 2, "
            "smallest 2 sqrt 2 - 2 ~ 0.828", "0.828", V.value("0.828"), V.exact(a["sym_min_eff"]), fmt=".6f",
            note=f"regret of the symmetric bids at the minimiser {a['sym_regret']:.1e}")
    c.check("Sec. 3.1", "... minimised at alpha = sqrt(2)/2", "sqrt(2)/2", V.value(math.sqrt(2) / 2, exact=True),
            V.numerical(a["sym_argmin"], 1e-9), fmt=".8f", note="bounded scalar minimiser, tolerance 1e-10")
    c.check("Sec. 3.1", "asymmetric equilibria appear beyond alpha_0 = (2 + sqrt 2)/4 ~ 0.854", "0.854",
            V.value("0.854"), V.exact(a["alpha0"]), fmt=".6f", note="where the cubic first has three nonnegative roots")
    c.check("Sec. 3.1", "alpha -> 1: U -> 3/2", "3/2", V.value("1.5"), V.exact(a["limit_welfare"]),
            fmt=".6f", note="a limit: evaluated at alpha = 1 - 1e-7 (smallest root, asymmetric equilibrium), judged "
                            "at the precision the paper prints (3/2 as 1.5)")
    c.check("Sec. 3.1", "alpha -> 1: U* -> 2", "2", V.value("2.0"), V.exact(a["limit_optimum"]), fmt=".6f",
            note="alpha = 1 - 1e-7")
    c.check("Sec. 3.1", "alpha -> 1: U/U* -> 0.75", "0.75", V.value("0.75"), V.exact(a["limit_eff"]), fmt=".6f")
    c.check("Sec. 3.1", "alpha -> 1: utility uniformity -> 1/2", "1/2", V.value("0.5"), V.exact(a["limit_uni"]),
            fmt=".6f")
    eq = two[two.regret <= TWO_PLAYER_REGRET]
    for key, bound_, label in (("efficiency", 0.75, "pi(Q) >= 3/4"), ("uniformity", 0.5, "tau(Q) >= 0.5"),
                               ("envy", 1.0, "rho(Q) = 1 (every two-player equilibrium is envy-free)")):
        c.check("Sec. 3.1, Thm 2", f"two players: {label}", f">= {bound_:g}", V.bound(">=", bound_, exact=True),
                V.exact(float(eq[key].min())) if len(eq) else None, fmt=".6f", instances=len(eq) or None,
                note=f"worst of {len(eq)} equilibria (largest regret <= {TWO_PLAYER_REGRET:g}; {len(two) - len(eq)} of "
                     f"{len(two)} runs did not reach one) in {two.groupby(['n', 'seed']).ngroups} random games; "
                     f"reserve {TWO_PLAYER_RESERVE:g} in the dynamics, metrics on x/Y")
    c.add("Sec. 3.1, Thm 2", "two players: the bounds are tight", "tight",
          f"alpha -> 1 gives U/U* {a['limit_eff']:.6f}, tau {a['limit_uni']:.6f}",
          V.worst([V.judge(V.value("0.75"), V.exact(a["limit_eff"])), V.judge(V.value("0.5"), V.exact(a["limit_uni"]))]),
          "the opposite-weight limit attains both bounds")
    # --- section 4 ------------------------------------------------------------------------------------------
    c.not_attempted("Sec. 4.1", "best response costs O(n log n) computation and O(n) messages", "O(n log n), O(n)",
                    "a complexity statement, not measured (the closed form is checked against a numerical "
                    "optimiser in tests/test_fixed_budget.py)")
    _all_parts(c, "Sec. 4.2", "local search quickly converges to a high (>= .7) efficiency", ">= .7",
               V.bound(">=", ".7"), {(d, m): V.t_interval(g.efficiency_after_5) for (d, m), g in fin.groupby(["delta", "m"])},
               label=lambda k: f"Δ={k[0]} m={k[1]}", note="lowest efficiency from iteration 5 on")
    # --- section 5 ------------------------------------------------------------------------------------------
    c.not_attempted("Sec. 5", "results for 150-250 users remain similar to those reported", "similar",
                    f"users above {big_m} not run")
    small = inf[inf.m < 60]
    large = inf[inf.m >= 60]
    parts = {(p, m): _share(g.gr_converged.sum(), len(g)) for (p, m), g in small.groupby(["pref", "m"])}
    _all_parts(c, "Sec. 5.1 (Fig. 3a,b)", "greedy does not converge within 500 iterations for m < 60", "0 converged",
               V.value(0.0, exact=True), parts, fmt=".2f", label=lambda k: f"{k[0]} m={k[1]}",
               note=f"share of runs converged, Wilson interval; cap {meta['greedy_cap']}")
    parts = {(p, m): _share(g.gr_converged.sum(), len(g)) for (p, m), g in large.groupby(["pref", "m"])}
    _all_parts(c, "Sec. 5.1 (Fig. 3a,b)", "greedy does converge for m >= 60", "all converged",
               V.value(1.0, exact=True), parts, fmt=".2f", label=lambda k: f"{k[0]} m={k[1]}",
               note="share of runs converged, Wilson interval")
    _all_parts(c, "Sec. 5.1", "greedy stabilises within 100 iterations", "<= 100", V.bound("<=", "100"),
               {(p, m): V.t_interval(g.gr_stabilised.to_numpy(dtype=float)) for (p, m), g in inf.groupby(["pref", "m"])},
               label=lambda k: f"{k[0]} m={k[1]}")
    m40 = inf[inf.m == meta["trace_m"]]
    _all_parts(c, "Sec. 5.1 (Fig. 4)", f"m = {meta['trace_m']}: both methods reach the same social welfare",
               "the same", V.verbal("the same"),
               {p: V.relative_paired_interval(g.gr_efficiency, g.ne_efficiency) for p, g in m40.groupby("pref")},
               fmt=".2%", label=lambda k: k)
    _all_parts(c, "Sec. 5.1 (Fig. 4)", f"m = {meta['trace_m']}: best response is faster (iterations to converge vs "
               "greedy's stabilisation)", "BR faster", V.ordering(">"),
               {p: V.paired_interval(g.gr_stabilised, g.br_iterations) for p, g in m40.groupby("pref")},
               label=lambda k: k, note="paired difference greedy stabilisation - best-response iterations")
    for pref in PREFS:
        d = inf[inf.pref == pref]
        _all_parts(c, "Sec. 5.1 (Fig. 3c,d)", f"{pref}: equilibrium efficiency approximately 0.9, independent of m",
                   "~0.9", V.verbal("about", 0.9), _per(d, "m", "ne_efficiency"))
    _all_parts(c, "Sec. 5.1 (Fig. 3c,d)", "equilibrium efficiency only slightly worse than the social optimum (1)",
               "slightly lower", V.verbal("slightly lower"),
               {(p, m): V.t_interval(g.ne_efficiency.to_numpy() - 1.0) for (p, m), g in inf.groupby(["pref", "m"])},
               fmt=".2%", label=lambda k: f"{k[0]} m={k[1]}", note="relative difference NE / optimum - 1")
    for pref, target in PAPER_GAIN.items():
        d = inf[inf.pref == pref]
        gains = {m: V.t_interval(100 * (g.ne_efficiency / g.wp_efficiency - 1)) for m, g in d.groupby("m")}
        _all_parts(c, "Sec. 5.1 (Fig. 3c,d)", f"{pref}: equilibrium efficiency ~{target}% above weight-proportional",
                   f"~{target}%", V.verbal("about", target), gains, fmt=".3g",
                   note="per-game gain NE/WP - 1 in %; the paper names no m, so every m")
    fair: dict = {}
    for (p, m), g in inf.groupby(["pref", "m"]):
        fair[(p, m, "uniformity")] = V.paired_interval(g.wp_uniformity, g.ne_uniformity)
        fair[(p, m, "envy")] = V.paired_interval(g.wp_envy, g.ne_envy)
    _all_parts(c, "Sec. 5.1 (Fig. 3e-h)", "weight-proportional has the highest fairness of the three methods "
               "(above the equilibrium)", "WP > NE", V.ordering(">"), fair,
               label=lambda k: f"{k[0]} m={k[1]} {k[2]}", note="paired difference WP - NE")
    parts = {(p, m): V.relative_paired_interval(g.ne_uniformity, g.wp_uniformity) for (p, m), g in
             inf.groupby(["pref", "m"])}
    _all_parts(c, "Sec. 5.1", "... the fairness at the equilibrium is close (to weight-proportional's)",
               "close", V.verbal("almost the same"), parts, fmt=".1%", label=lambda k: f"{k[0]} m={k[1]}",
               note="utility uniformity, relative paired difference NE vs WP")
    for pref, printed in (("uniform", "0.7"), ("correlated", "0.6")):
        d = inf[inf.pref == pref]
        _all_parts(c, "Sec. 5.1 (Fig. 3e,f)", f"{pref}: utility uniformity > {printed}", f"> {printed}",
                   V.bound(">", printed), _per(d, "m", "ne_uniformity"))
    for pref in PREFS:
        d = inf[inf.pref == pref]
        ms = sorted(d.m.unique())
        c.check("Sec. 5.1 (Fig. 3e,f)", f"{pref}: utility uniformity decreases in the number of users "
                f"(m = {ms[0]} vs {ms[-1]})", "decreases",
                V.ordering(">"), V.welch_interval(d[d.m == ms[0]].ne_uniformity, d[d.m == ms[-1]].ne_uniformity),
                note="Welch interval, independent games")
        c.check("Sec. 5.1", f"{pref}: ... and flattens out (m = {ms[-2]} vs {ms[-1]} almost the same)", "flattens",
                V.verbal("almost the same"),
                V.relative_welch_interval(d[d.m == ms[-1]].ne_uniformity, d[d.m == ms[-2]].ne_uniformity), fmt=".1%")
    d = inf[inf.m == big_m]
    _all_parts(c, "Sec. 5.1", f"social optimum: utility uniformity and envy-freeness go to zero (m = {big_m})", "-> 0",
               V.value(0.0, exact=True), {f"{p} {k}": V.t_interval(g[f"so_{k}"]) for p, g in d.groupby("pref")
                                          for k in ("uniformity", "envy")}, label=lambda k: k)
    d = inf[(inf.pref == "correlated") & (inf.m == min(inf.m))]
    _all_parts(c, "Sec. 5.1", f"correlated: even with few users (m = {min(inf.m)}) some get nothing at the social "
               "optimum, so its uniformity and envy-freeness go to zero", "-> 0",
               V.value(0.0, exact=True), {k: V.t_interval(d[f"so_{k}"]) for k in ("uniformity", "envy")},
               label=lambda k: k)
    _all_parts(c, "Sec. 5.1 (Fig. 3g)", "uniform: the equilibrium is completely envy-free", ">= 1",
               V.bound(">=", 1.0, exact=True), _per(inf[inf.pref == "uniform"], "m", "ne_envy"))
    _all_parts(c, "Sec. 5.1 (Fig. 3h)", "correlated: the equilibrium is almost envy-free", "almost 1",
               V.verbal("almost the same"),
               {m: V.t_interval(g.ne_envy.to_numpy() - 1.0) for m, g in inf[inf.pref == "correlated"].groupby("m")},
               fmt=".2%", note="relative difference from 1")
    # --- section 5.2 ----------------------------------------------------------------------------------------
    c.not_attempted("Sec. 5.2", "correlated preferences give no significant difference under finite parallelism",
                    "no difference", "finite parallelism run with uniform preferences only (as the paper shows)")
    conv_runs = fin[fin.converged]
    c.check("Sec. 5.2", "the local search usually requires only two iterations (read: at most one swap per call)",
            "usually", V.verbal("usually"), _share(fin.calls_at_most_1_swap.sum(), fin.calls.sum()), fmt=".3f",
            note=f"share of all {int(fin.calls.sum()):,} local-search calls, Wilson interval; non-converged runs make "
                 f"most calls; in converged runs {conv_runs.calls_at_most_1_swap.sum() / max(conv_runs.calls.sum(), 1):.3f}"
                 f" of {int(conv_runs.calls.sum()):,} calls")
    head = fin.ratio.between(1, 2)
    parts = {(dl, m): _share(g.converged.sum(), len(g)) for (dl, m), g in fin[head].groupby(["delta", "m"])}
    _all_parts(c, "Sec. 5.2 (Fig. 5)", "no convergence for Δ = 5 with 20-40 users and Δ = 20 with 5-10 users "
               "(δ = mΔ/n in [1, 2])", "0 converged", V.value(0.0, exact=True), parts, fmt=".2f",
               label=lambda k: f"Δ={k[0]} m={k[1]}", note=f"share converged, Wilson interval; cap {meta['finite_cap']}")
    parts = {(dl, m): _share(g.converged.sum(), len(g)) for (dl, m), g in fin[~head].groupby(["delta", "m"])}
    _all_parts(c, "Sec. 5.2 (Fig. 5)", "... and convergence, quickly, otherwise", "all converged",
               V.value(1.0, exact=True), parts, fmt=".2f", label=lambda k: f"Δ={k[0]} m={k[1]}")
    _all_parts(c, "Sec. 5.2 (Fig. 6)", "where it does not converge the system still keeps a high efficiency after a "
               "few iterations (read: >= .7 from iteration 5 on)", ">= .7", V.bound(">=", ".7"),
               {(dl, m): V.t_interval(g.efficiency_after_5) for (dl, m), g in fin[head].groupby(["delta", "m"])},
               label=lambda k: f"Δ={k[0]} m={k[1]}")
    f5 = fin[fin.delta == 5]
    inside = f5.m.between(20, 40)
    c.check("Sec. 5.2 (Fig. 7)", "Δ = 5: a drop in fairness (utility uniformity) for 20-40 users", "drop",
            V.ordering(">"), V.welch_interval(f5[~inside].uniformity, f5[inside].uniformity),
            note="Welch interval: other m minus 20-40")
    big = f5[f5.m >= 60]
    ref = inf[(inf.pref == "uniform") & inf.m.isin(big.m.unique())]
    for key, col in (("efficiency", "ne_efficiency"), ("envy", "ne_envy")):
        parts = {m: V.relative_welch_interval(big[big.m == m][key], ref[ref.m == m][col]) for m in sorted(big.m.unique())
                 if (ref.m == m).any()}
        _all_parts(c, "Sec. 5.2 (Fig. 7)", f"Δ = 5, more users: {key} high, similar to the infinite model", "similar",
                   V.verbal("almost the same"), parts, fmt=".1%", note="relative Welch difference vs infinite, same m")
    c.check("Sec. 5.2 (Fig. 7)", "Δ = 5, more users (m >= 60): a lower utility uniformity (than with few users, "
            "m <= 15)", "lower", V.ordering(">"),
            V.welch_interval(f5[f5.m <= 15].uniformity, f5[f5.m >= 60].uniformity))
    f20 = fin[fin.delta == 20]
    head20 = f20.ratio.between(1, 2)
    c.check("Sec. 5.2 (Fig. 7)", "Δ = 20: closer to the infinite model, no drop in performance (read: uniformity at "
            "5-10 users almost the same as at the other m)", "no drop", V.verbal("almost the same"),
            V.relative_welch_interval(f20[head20].uniformity, f20[~head20].uniformity), fmt=".1%")

    # --- ours ------------------------------------------------------------------------------------------------
    for key, printed, col in (("efficiency", "0.90", "ms_eff_min"), ("uniformity", "0.65", "ms_uni_min"),
                              ("envy", "0.97", "ms_envy_min")):
        parts = {(p, m): V.t_interval(g[col].to_numpy()) for (p, m), g in inf.groupby(["pref", "m"])}
        _all_parts(o, "Sec. 1, 2", f"{key} >= {printed} at the worst equilibrium reached from {meta['starts'] + 1} "
                   "starts (the paper's pi(Q), tau(Q), rho(Q) are minima over equilibria)", f">= {printed}",
                   V.bound(">=", printed), parts, label=lambda k: f"{k[0]} m={k[1]}",
                   note=f"distinct equilibria reached per game: mean {inf.ms_distinct.mean():.2f}, max "
                        f"{inf.ms_distinct.max()}")
    return c, o


def _normalisation_text(tested: dict | None) -> str:
    if not tested:
        return "Not tested in this run, so the cause stays open."
    lo_hi = "; ".join(f"{p} {a:.3g}-{b:.3g} %" for p, (a, b) in tested["raw_gain"].items())
    shift = math.ceil(tested["gain_shift"] * 10) / 10
    matched = {p: ms for p, ms in tested["raw_match"].items() if ms}
    verdict = ("By the same rule as the claim, the raw-weight gain is about the paper's figure at no m either, so "
               "normalisation is not the cause; the profiles' distribution and the paper's figures (not in the text we "
               "have) remain unchecked, and the cause stays open." if not matched else
               "By the same rule as the claim, the raw-weight gain is about the paper's figure at "
               + "; ".join(f"{p} m = {', '.join(ms)}" for p, ms in matched.items())
               + ": reading the weights unnormalised explains the gap there.")
    return (f"Tested (above): with the weights not normalised the gain is {lo_hi} by m, within {shift:g} points of the "
            f"normalised one at every m. " + verdict)


def _greedy_text(tested: dict | None) -> str:
    if not tested:
        return ("The verdicts on the iteration counts hold for these choices only; they were not varied in this "
                "run.")
    holds = tested["greedy_holds"]
    return (f"Varied (above, {tested['greedy_runs']} runs): the paper's three statements together (no convergence "
            "within the cap for m < 60, convergence for m >= 60, stabilisation within 100 iterations) hold, on the "
            "means over seeds, for " + (", ".join(holds) if holds else "none of the (step, gap) pairs run") + ". "
            + ("The share of converged runs changes with the step or threshold at some m, so the convergence verdicts "
               "judge our choice as much as the paper's claim." if tested["greedy_depends"] else
               "The share of converged runs does not change with them at any m run."))


def _discussion(summary: pd.DataFrame, inf: pd.DataFrame, fsum: pd.DataFrame, tested: dict | None = None) -> str:
    c = summary[summary.pref == "correlated"]
    u = summary[summary.pref == "uniform"]
    rng_ = lambda s: f"{s.min():.3g}-{s.max():.3g}"  # noqa: E731
    spread = (inf.ms_eff_max - inf.ms_eff_min)
    return f"""
## Reading the verdicts

* **Efficiency floor (>= 0.90).** The equilibrium's efficiency is {rng_(u.ne_eff)} (uniform) and
  {rng_(c.ne_eff)} (correlated) by m: the correlated games fall below 0.90 for most m, so the floor
  is not established ("near": within 5%). The random starts reach equilibria whose efficiency differs
  by at most {spread.max():.2g} from the weight-proportional one (mean spread {spread.mean():.2g}), so
  the shortfall is not an artefact of one starting point: the worst equilibrium found is at most that much
  lower (our comparisons).
* **Gain over weight-proportional** ("about 50%" uniform, "about 30%" correlated). Uniform: {rng_(u["gain_over_wp_%"])}
  % growing with m; correlated: {rng_(c["gain_over_wp_%"])} %. Neither is "about" the paper's figure (+-5% of it)
  at any m. Our weight-proportional baseline is already efficient for correlated, normalised weights
  ({rng_(c.wp_eff)}); the paper does not say whether its baseline normalises the weights or how its
  profiles are drawn beyond U(0, 1). {_normalisation_text(tested)}
* **Greedy adjustment.** The paper gives neither its step size nor its marginal-gap threshold; ours are
  1% of the budget per step and a 5% relative gap. {_greedy_text(tested)}
* **Finite parallelism.** The start (weight-proportional on the Δ best machines), the reserve bid and the
  first-improvement order of the local search are ours. With Δ = 20 and m = 5-10 (δ in [1, 2]) our runs
  do not converge and their fairness drops, where the paper reports no drop for Δ = 20 although it
  lists the same m as non-converging. Non-converged runs report the minimum over the second half of the
  run, as the paper does ("the minimum value we observe"), a pessimistic number by construction.
"""
