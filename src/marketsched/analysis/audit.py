"""Does a job gain by lying? A paired audit of any registered market mechanism.

Steps of :func:`audit`:

1. simulate the truthful run once (every job reports its true value, estimate and arrival);
2. pick focal jobs (:func:`focal_jobs`): ``per_band`` original jobs from each value band of
   Shudler et al. (2010) (low, middle, high), drawn with ``seed``; a split job's serial copies
   deviate together (one user owns them);
3. for each focal job and each deviation (:class:`Deviation`: ``value`` multiplies its bid,
   ``estimate`` its run-time estimate, ``delay`` adds seconds to its submission, ``deadline``
   stretches the time to its deadline, ``node`` makes it join a worse node), simulate again
   with only that job's reports changed: the same jobs, true values, deadlines and seed (the
   mechanism's own random draws are seeded by the scenario), so the pair differs only by the lie;
4. the gain is the focal job's **true** utility in the deviating run minus that in the truthful
   run, summed over its copies. Utility: the mechanism's own (registry ``utility``), else
   ``-w x flow time - payment`` (Shudler et al. (2010), Eq. 3) with the true value ``w``. Under a
   delay the flow time counts from the true arrival (the job existed, it just waited to say so);
   a mechanism's own utility is given the jobs with the deviator's true arrival in
   ``workload.submit_time`` (its reported one is in the run's policy): EES's waiting cost then
   counts from the true arrival and its value of running, ``w x`` the time to the deadline, is
   the true one; Egg's value schedule and the share markets' ``v x CPU-seconds`` do not depend on
   the arrival.

:func:`summary` gives per deviation kind and amount the share of profitable deviations (gain
above a relative tolerance of 1e-9) with a 95% Wilson interval, and the largest gain with the
case that reproduces it. :func:`claim_verdicts` judges each incentive property the mechanism
claims in the registry by one rule. A deviation reruns the simulation from the deviator's arrival (a
snapshot of the engine) where the mechanism allows it, else from the start
(:mod:`marketsched.analysis.reruns`).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, replace

import numpy as np

KINDS = ("value", "estimate", "delay", "deadline", "node")
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Deviation:
    """A lie: ``value`` (bid x amount), ``estimate`` (run-time estimate x amount), ``delay``
    (submission + amount seconds), ``deadline`` (the time from submission to the reported
    deadline x amount) or ``node`` (the job joins its node of rank ``amount`` by tentative
    utility, 1 being its best, where the mechanism lets jobs choose: DLGM, P-DLGM)."""

    kind: str
    amount: float

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"deviation: unknown kind {self.kind!r}; choose from {', '.join(KINDS)}")
        if self.kind in ("value", "estimate", "deadline") and not self.amount > 0:
            raise ValueError(f"deviation {self.kind}: the factor must be > 0, got {self.amount}")
        if self.kind == "delay" and not self.amount >= 0:
            raise ValueError(f"deviation delay: the seconds must be >= 0, got {self.amount}")
        if self.kind == "node" and not (self.amount >= 1 and float(self.amount).is_integer()):
            raise ValueError(f"deviation node: the rank must be a whole number >= 1 (1 = the best node), got {self.amount}")

    @classmethod
    def parse(cls, text: str) -> list[Deviation]:
        """``"value:0.5,0.8"`` -> two deviations (``KIND:AMOUNT[,AMOUNT...]``)."""
        kind, colon, amounts = text.partition(":")
        if not colon or not amounts.strip():
            raise ValueError(f"expected KIND:AMOUNT[,AMOUNT...] (kinds: {', '.join(KINDS)}), got {text!r}")
        try:
            return [cls(kind.strip(), float(a)) for a in amounts.split(",") if a.strip()]
        except ValueError as exc:
            raise ValueError(f"{text!r}: {exc}") from None


def groups(workload) -> np.ndarray:
    """The original job of each row (copies of a split job share it): 0, 1, ... in row order."""
    parent = workload.meta.get("parent")
    if parent is None:
        return np.arange(len(workload))
    parent = np.asarray(parent)
    return np.r_[0, np.cumsum(parent[1:] != parent[:-1])] if len(parent) else parent


def focal_jobs(jobs, per_band: int, seed: int) -> list[np.ndarray]:
    """``per_band`` original jobs drawn from each value band (fewer where a band has fewer), as
    arrays of their rows, in band order."""
    from marketsched.analysis.metrics import VALUE_BANDS, value_band

    g = groups(jobs.workload)
    first = np.r_[0, np.flatnonzero(np.diff(g)) + 1] if len(g) else g
    band = value_band(jobs.true_value[first])
    rng = np.random.default_rng(seed)
    out = []
    for b in VALUE_BANDS:
        pool = np.flatnonzero(band == b)
        for k in np.sort(rng.choice(pool, size=min(per_band, len(pool)), replace=False)):
            out.append(np.flatnonzero(g == g[first[k]]))
    return out


def group_draws(jobs, share: float, draws: int, seed: int) -> list[np.ndarray]:
    """``draws`` groups, each a random ``share`` of the original jobs (at least one; a split job's
    copies together), drawn with ``seed``: the rows of each group. The group model of Shudler et
    al. (2010) (a share of the users bids untruthfully), as coalitions that lie together."""
    if not 0 < share <= 1:
        raise ValueError(f"group share must be in (0, 1], got {share}")
    if draws < 1:
        raise ValueError(f"group draws must be at least 1, got {draws}")
    g = groups(jobs.workload)
    n = int(g[-1]) + 1 if len(g) else 0
    if n == 0:
        raise ValueError("no jobs to draw a group from")
    size = max(1, int(round(share * n)))
    rng = np.random.default_rng([seed, 7])
    return [np.flatnonzero(np.isin(g, rng.choice(n, size=size, replace=False))) for _ in range(draws)]


def deviate(jobs, rows, dev: Deviation):
    """``(jobs', rows')``: the jobs with ``rows`` reporting ``dev``, and where those rows are now
    (a delay can move them). True values stay true; ``jobs'.deadline`` holds the *reported*
    deadlines (:func:`true_utility` is given the true ones back)."""
    w = jobs.workload
    if dev.kind == "value":
        if jobs.bid is None:
            raise ValueError("value deviations need bids: the mechanism takes none")
        bid = jobs.bid.copy()
        bid[rows] *= dev.amount
        return replace(jobs, bid=bid), rows
    if dev.kind == "estimate":
        est = w.runtime_estimate.copy()
        if np.isnan(est[rows]).any():
            raise ValueError("estimate deviations need run-time estimates (--estimates exact or badness:f=...)")
        est[rows] *= dev.amount
        return replace(jobs, workload=replace(w, runtime_estimate=est)), rows
    if dev.kind == "deadline":
        if jobs.deadline is None:
            raise ValueError("deadline deviations need deadlines (--deadlines patience or slack)")
        deadline = jobs.deadline.copy()
        deadline[rows] = w.submit_time[rows] + dev.amount * (deadline[rows] - w.submit_time[rows])
        return replace(jobs, deadline=deadline), rows
    if dev.kind == "node":
        rank = np.ones(len(w), np.int64) if jobs.node_rank is None else jobs.node_rank.copy()
        rank[rows] = int(dev.amount)
        return replace(jobs, node_rank=rank), rows
    submit = w.submit_time.copy()
    submit[rows] += dev.amount
    order = np.argsort(submit, kind="stable")
    n = len(w)
    meta = {k: (v[order] if isinstance(v, np.ndarray) and v.shape[:1] == (n,) else v) for k, v in w.meta.items()}
    cols = {k: v[order] for k, v in w.columns.items()}
    cols["submit_time"] = submit[order]
    w2 = replace(w, **cols, meta=meta)
    per_job = {k: (None if getattr(jobs, k) is None else np.asarray(getattr(jobs, k))[order])
               for k in ("true_value", "bid", "deadline", "min_reliability", "node_rank")}
    where = np.empty(n, np.int64)
    where[order] = np.arange(n)
    return replace(jobs, workload=w2, **per_job), np.sort(where[rows])


def true_utility(jobs, run, rows, true_submit) -> float:
    """The focal rows' summed true utility in ``run`` (module docstring, step 4)."""
    from marketsched.engine.records import FinalState
    from marketsched.mechanisms.registry import get

    fn = get(run.mechanism).utility
    if fn is not None:
        if not np.array_equal(true_submit, jobs.workload.submit_time[rows]):
            submit = jobs.workload.submit_time.copy()
            submit[rows] = true_submit
            jobs = replace(jobs, workload=replace(jobs.workload, submit_time=submit))
        return float(np.sum(np.asarray(fn(jobs, run), dtype=np.float64)[rows]))
    r = run.records
    done = r.state[rows] == FinalState.COMPLETED
    if not done.all():
        raise ValueError(f"{run.mechanism}: a focal job did not complete; its utility is undefined in this model")
    flow = r.end_time[rows] - true_submit
    return float(np.sum(-jobs.true_value[rows] * flow - r.payment[rows]))


def rows_of(jobs, job_ids) -> list[np.ndarray]:
    """The rows of each original job id (all its copies); ValueError naming an unknown id."""
    out = []
    for jid in job_ids:
        rows = np.flatnonzero(jobs.workload.job_id == jid)
        if not len(rows):
            raise ValueError(f"no job with id {jid} in the workload")
        out.append(rows)
    return out


def audit(jobs, mechanism: str, params: dict | None, deviations, per_band: int = 3, seed: int = 1, progress=None,
          job_ids=None, group: float | None = None, group_draws_: int = 5, rerun: str = "incremental"):
    """One row per (focal job, deviation): ``job_id``, ``band``, ``kind``, ``amount``,
    ``truthful``, ``deviating`` (true utilities) and ``gain`` (module docstring). ``job_ids``:
    audit these jobs instead of a sample (to reproduce a case). ``group``: instead of one job,
    ``group_draws_`` random groups of this share of the jobs lie together (:func:`group_draws`);
    a row is then a group (``job_id`` its draw number, ``band`` "group", ``copies`` its rows) and
    its utilities are the members' sums; column ``who`` says which. ``rerun``: ``"incremental"``
    (from a snapshot at the deviator's arrival where the mechanism allows it, else full) or
    ``"full"`` (:mod:`marketsched.analysis.reruns`; both give the same table)."""
    import pandas as pd

    from marketsched.analysis.metrics import value_band
    from marketsched.analysis.reruns import Reruns
    from marketsched.mechanisms.registry import get
    from marketsched.scenario import in_form, run

    m = get(mechanism)
    if not m.market:
        raise ValueError(f"{mechanism} takes no reports (no bids, no payments): nothing to audit")
    jobs = in_form(jobs, mechanism)[0]  # the jobs the mechanism runs (split, whole machine): lies are theirs
    inputs = (*m.needs, *m.optional)
    for dev in deviations:
        if dev.kind == "deadline" and "deadlines" not in inputs:
            raise ValueError(f"{mechanism} takes no deadlines: a deadline lie changes nothing (mechanisms with "
                             "deadlines: EES, relaxed EES, Egg)")
        if dev.kind == "node" and "node-choice" not in inputs:
            raise ValueError(f"{mechanism} does not let jobs choose their node (node lies: DLGM, P-DLGM)")
    if group is not None:
        focal = group_draws(jobs, group, group_draws_, seed)
    else:
        focal = focal_jobs(jobs, per_band, seed) if job_ids is None else rows_of(jobs, job_ids)
    delays = [dev.amount for dev in deviations if dev.kind == "delay"]
    if delays and "deadlines" in inputs and jobs.deadline is not None:
        rows = np.concatenate(focal)
        late = np.flatnonzero(jobs.workload.submit_time[rows] + max(delays) >= jobs.deadline[rows])
        if len(late):
            r = rows[late[0]]
            raise ValueError(f"{mechanism}: a delay of {max(delays):g} s makes job {jobs.workload.job_id[r]} arrive "
                             f"at or after its deadline ({jobs.deadline[r] - jobs.workload.submit_time[r]:.6g} s "
                             "after its submission); a job does not arrive after its deadline: choose shorter delays")
    truthful = run(jobs, mechanism, params)
    reruns = Reruns(jobs, mechanism, params, rerun)
    rows_of_focal: dict[int, list] = {}
    done = 0
    total = len(focal) * len(deviations)
    for i in reruns.order(focal):
        rows = focal[i]
        u0 = true_utility(jobs, truthful, rows, jobs.workload.submit_time[rows])
        if group is not None:
            who = (i, "group", float(np.mean(jobs.true_value[rows])), len(rows), "group")
        else:
            who = (int(jobs.workload.job_id[rows[0]]), str(value_band(jobs.true_value[rows[:1]])[0]),
                   float(jobs.true_value[rows[0]]), len(rows), "job")
        out = rows_of_focal[i] = []
        for dev in deviations:
            jobs2, rows2 = deviate(jobs, rows, dev)
            run2 = reruns.deviating(jobs2, int(rows.min()))
            judge = replace(jobs2, deadline=jobs.deadline) if dev.kind == "deadline" else jobs2
            u1 = true_utility(judge, run2, rows2, jobs.workload.submit_time[rows])
            out.append((*who[:4], dev.kind, dev.amount, u0, u1, u1 - u0, who[4]))
            done += 1
            if progress is not None:
                progress(done, total)
        # each rerun's engine and policy reference each other: free them now, not when the cyclic
        # collector next runs (on a trace, hundreds of MB piled up over a few focal jobs)
        gc.collect()
    table = [row for i in range(len(focal)) for row in rows_of_focal[i]]
    return pd.DataFrame(table, columns=["job_id", "band", "true_value", "copies", "kind", "amount", "truthful",
                                        "deviating", "gain", "who"])


def profitable(table) -> np.ndarray:
    """Gains above the relative tolerance (floating-point noise is not a profit)."""
    scale = np.maximum(1.0, np.abs(table["truthful"].to_numpy()))
    return table["gain"].to_numpy() > TOLERANCE * scale


def summary(table, by=("kind", "amount")):
    """Per group (default: kind and amount; add ``"band"`` for value bands): deviations,
    profitable share with its 95% Wilson interval, mean gain, and the largest gain with its job
    id (the case to reproduce)."""
    import pandas as pd

    from marketsched.analysis.verdicts import wilson_interval

    t = table.assign(profitable=profitable(table))
    rows = []
    for key, g in t.groupby(list(by), sort=False):
        k, n = int(g["profitable"].sum()), len(g)
        share = wilson_interval(k, n)
        lo, hi = share.lo, share.hi
        best = g.loc[g["gain"].idxmax()]
        rows.append({**dict(zip(by, key)), "deviations": n, "profitable": k, "share": k / n,
                     "ci_low": lo, "ci_high": hi, "mean_gain": float(g["gain"].mean()),
                     "max_gain": float(best["gain"]), "max_gain_job": int(best["job_id"])})
    return pd.DataFrame(rows)


def covered(table, claim) -> np.ndarray:
    """Rows of ``table`` that are lies ``claim`` speaks of: its kinds, within its bounds, and not
    the truth itself (a factor of 1, a delay of 0)."""
    mask = np.zeros(len(table), dtype=bool)
    kinds, amounts = table["kind"].to_numpy(), table["amount"].to_numpy(dtype=float)
    for lie in claim.lies:
        kind, lo, hi = claim.bounds(lie)
        truth = 0.0 if kind == "delay" else 1.0
        mask |= (kinds == kind) & (amounts >= lo) & (amounts <= hi) & (amounts != truth)
    return mask


def claim_verdicts(table, claims) -> list[dict]:
    """One verdict per claim (:class:`marketsched.mechanisms.registry.Claim`), by one rule:

    * no covered lie tried: ``not audited``;
    * ``dominant``: ``holds on this sample`` if no covered lie paid (with the 95% Wilson upper
      bound of the share that pays), else ``violated``, with the largest gain and its case;
    * ``bayes-nash``: ``contradicted`` if the mean gain over the covered lies is above 0 with 95%
      confidence (t-interval of the paired gains), else ``consistent``; single lies that pay are
      counted, not decisive;
    * ``myopic``: ``not testable ex post`` (the claim is about the utility promised at the
      report), with how often a lie paid after the fact.

    Each verdict: ``claim``, ``strength``, ``source``, ``verdict``, ``lies``, ``paid``,
    ``mean_gain`` (an :class:`~marketsched.analysis.verdicts.Interval`), ``case`` (the row of the
    largest gain, or None) and ``text`` (one line)."""
    from marketsched.analysis.verdicts import paired_interval, wilson_interval

    out = []
    if len(table) and "who" in table and (table["who"] != "job").all():
        return [{"claim": c.text, "strength": c.strength, "source": c.source, "lies": 0, "paid": 0, "mean_gain": None,
                 "case": None, "verdict": "not audited",
                 "text": "not audited: the claim is about one job's lies, this audit made groups lie together"}
                for c in claims]
    for claim in claims:
        t = table[covered(table, claim) & (table["who"].to_numpy() == "job" if "who" in table else True)]
        row = {"claim": claim.text, "strength": claim.strength, "source": claim.source, "lies": len(t), "paid": 0,
               "mean_gain": None, "case": None}
        if not len(t):
            kinds = ", ".join(claim.bounds(lie)[0] for lie in claim.lies)
            out.append({**row, "verdict": "not audited",
                        "text": f"not audited: no lie of kind {kinds} was tried (add --deviate)"})
            continue
        paid = profitable(t)
        k, n = int(paid.sum()), len(t)
        gain = paired_interval(t["deviating"], t["truthful"])
        case = t.loc[t["gain"].idxmax()]
        row.update(paid=k, mean_gain=gain, case=case if k else None)
        counts = f"{k} of {n} lies paid"
        where = (f"; largest gain {case.gain:.4g} by job {case.job_id} ({case.kind} {case.amount:g})" if k else "")
        if claim.strength == "dominant":
            verdict = "violated" if k else "holds on this sample"
            text = f"{verdict}: {counts}" + (where if k else f" (share <= {wilson_interval(0, n).hi:.2f} at 95%)")
        elif claim.strength == "bayes-nash":
            verdict = "contradicted" if gain.lo > 0 else "consistent"
            text = f"{verdict}: mean gain {gain.text('.4g')}; {counts}{where}"
        else:
            verdict = "not testable ex post"
            text = f"{verdict}: {counts} after the fact{where}"
        out.append({**row, "verdict": verdict, "text": text})
    return out


def figure(table, kind: str, title: str = ""):
    """Gains of one deviation kind: one column of points per amount (symlog scale), profitable
    ones in red, with the profitable share above each column."""
    from marketsched.analysis.plots import pyplot

    plt = pyplot()
    t = table[table["kind"] == kind]
    amounts = sorted(t["amount"].unique())
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for i, a in enumerate(amounts):
        g = t[t["amount"] == a]
        p = profitable(g)
        x = i + np.linspace(-0.15, 0.15, len(g)) if len(g) > 1 else np.full(len(g), float(i))
        ax.scatter(x[~p], g["gain"].to_numpy()[~p], s=14, color="tab:blue")
        ax.scatter(x[p], g["gain"].to_numpy()[p], s=14, color="tab:red")
        ax.annotate(f"{p.sum()}/{len(g)} pay", (i, 1.0), xycoords=("data", "axes fraction"), ha="center",
                    va="bottom", fontsize=8)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_yscale("symlog")
    lo, hi = float(t["gain"].min()), float(t["gain"].max())
    ax.set_ylim(min(lo * 3, -1.0), max(hi * 3, 1.0))  # symlog: a factor of 3 of headroom keeps points off the frame
    ax.set_xticks(range(len(amounts)), [f"{a:g}" for a in amounts])
    ax.set_xlabel({"value": "bid / true value", "estimate": "reported / actual run-time estimate",
                   "delay": "arrival delayed by (s)", "deadline": "reported / true time to the deadline",
                   "node": "rank of the node joined (1: the best)"}[kind])
    ax.set_ylabel("gain in true utility (red: profitable)")
    ax.set_title(title, fontsize=9, pad=16)
    fig.tight_layout()
    return fig
