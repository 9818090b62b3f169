"""Pictures of one run: Gantt chart, series over time, slowdown per value band.

Every function takes what a run leaves behind (the per-job table of
:func:`marketsched.results.job_table_of`, the event log of :mod:`marketsched.engine.events`
and the machine's processors) and returns a matplotlib Figure; :func:`save` writes it as
PNG or SVG. The series come from :mod:`marketsched.analysis.timeline` (processor
assignment for the Gantt chart: first fit, see there). Matplotlib runs with the Agg
backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

GANTT_MAX_JOBS = 5000
FORMATS = ("png", "svg")


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (imported on first use: plotting is optional)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _unit(span: float) -> tuple[float, str]:
    """Seconds per plotted time unit and its name: hours up to three days, days beyond."""
    return (3600.0, "hours") if span <= 3 * 86400 else (86400.0, "days")


def _scaled(t, t0, unit):
    return (np.asarray(t, dtype=np.float64) - t0) / unit


GANTT_LABEL_MAX = 150  # jobs up to which each bar carries its job id


def gantt(segs, capacity: int, title: str = "", max_jobs: int = GANTT_MAX_JOBS, t0: float = 0.0, group=None,
          group_name: str = "", labels: bool | None = None):
    """Processors as rows, one bar per run segment and processor; each resumed segment starts
    with a black tick (a preemption visible as a gap and a tick). Refuses more than ``max_jobs``
    jobs (ValueError suggesting a slice).

    Colours: ``group`` (one label per workload row, e.g. the value band or the user) gives one
    colour per group with a legend titled ``group_name``; without it, a job's segments share a
    colour taken from a map of as many colours as jobs (neighbouring job rows get distant
    hues). ``labels``: write each bar's job id on it (default: up to :data:`GANTT_LABEL_MAX`
    jobs, beyond which the ids would overlap)."""
    plt = pyplot()
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.patches import Patch

    n_jobs = int(segs["row"].nunique())
    if n_jobs > max_jobs:
        raise ValueError(f"a Gantt chart of {n_jobs:,} jobs is unreadable and slow to draw; the limit is {max_jobs:,}: "
                         "plot a slice of the workload (simulate with --jobs N, e.g. --jobs 2000)")
    labels = n_jobs <= GANTT_LABEL_MAX if labels is None else labels
    fig, ax = plt.subplots(figsize=(12, 6), dpi=110)
    rows = segs["row"].to_numpy()
    handles = []
    if group is not None:
        group = np.asarray(group, dtype=object)
        names = list(dict.fromkeys(group[rows].tolist()))
        cmap = plt.get_cmap("tab10" if len(names) <= 10 else "turbo", len(names))
        of_group = {g: cmap(i) for i, g in enumerate(names)}
        colour_of = {r: of_group[group[r]] for r in dict.fromkeys(rows.tolist())}
        handles = [Patch(color=of_group[g], label=str(g)) for g in names]
    else:
        order = list(dict.fromkeys(rows.tolist()))
        cmap = plt.get_cmap("turbo", max(len(order), 1))
        # a golden-ratio stride through the map: consecutive jobs get far-apart colours
        colour_of = {r: cmap(int((i * 0.618034 % 1) * len(order))) for i, r in enumerate(order)}
    polys, colours, ticks, texts = [], [], [], []
    end_open = np.nanmax(segs["end"].to_numpy()) if len(segs) else t0
    unit, unit_name = _unit(end_open - t0)
    for row, jid, a, b, res, first in zip(rows.tolist(), segs["job_id"].tolist(), segs["start"].tolist(),
                                          segs["end"].tolist(), segs["resources"].tolist(), segs["first"].tolist()):
        x0, x1 = _scaled(a, t0, unit), _scaled(b if b == b else end_open, t0, unit)
        for part in res.split():
            lo, _, hi = part.partition("-")
            p0, p1 = int(lo), int(hi or lo)
            polys.append([(x0, p0 - 0.4), (x1, p0 - 0.4), (x1, p1 + 0.4), (x0, p1 + 0.4)])
            colours.append(colour_of[row])
            if not first:
                ticks.append([(x0, p0 - 0.45), (x0, p1 + 0.45)])
            if labels:
                texts.append(((x0 + x1) / 2, (p0 + p1) / 2, str(jid)))
    ax.add_collection(PolyCollection(polys, facecolors=colours, edgecolors="white", linewidths=0.3))
    for x, y, text in texts:
        ax.text(x, y, text, ha="center", va="center", fontsize=6, clip_on=True)
    if ticks:
        ax.add_collection(LineCollection(ticks, colors="black", linewidths=0.8, label="resumed after preemption"))
    if ticks or handles:
        ax.legend(handles=[*handles, *ax.get_legend_handles_labels()[0]], loc="upper right", fontsize=8,
                  title=group_name or None, title_fontsize=8)
    ax.set_xlim(0, max(_scaled(end_open, t0, unit), 1e-9))
    ax.set_ylim(-0.5, capacity - 0.5)
    ax.set_xlabel(f"{unit_name} since the first submission")
    ax.set_ylabel("processor (first-fit assignment)")
    ax.set_title(title or f"{n_jobs:,} jobs, {len(segs):,} run segments")
    fig.tight_layout()
    return fig


def over_time(series, title: str = "", t0: float = 0.0, kth_price: bool = False):
    """Stacked panels over time from :func:`marketsched.analysis.timeline.binned`: utilisation, queue length and,
    when present, the bids (mean running bid, highest queued bid) and the payments settled so far.
    ``kth_price``: the run is HB or NPHB with the k-th price, whose price is the highest queued
    bid (Shudler et al. (2010), section III.B): the legend says so only then."""
    plt = pyplot()
    panels = [("utilisation", "utilisation"), ("queue", "jobs waiting")]
    if "running_bid" in series:
        panels.append(("bids", "bid per unit time"))
    if "paid" in series and np.nanmax(np.abs(series["paid"].to_numpy()), initial=0) > 0:
        panels.append(("paid", "payments settled\n(cumulative)"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 2.2 * len(panels) + 0.6), dpi=110, sharex=True, squeeze=False)
    times = series.index.to_numpy()
    step = float(times[1] - times[0]) if len(times) > 1 else 3600.0
    unit, unit_name = _unit(float(times[-1]) + step - t0 if len(times) else 0.0)
    x = _scaled(times, t0, unit)
    width = step / unit
    for ax, (key, label) in zip(axes[:, 0], panels):
        if key == "bids":
            ax.step(x, series["running_bid"], where="post", label="mean bid of running jobs")
            ax.step(x, series["queued_bid"], where="post",
                    label="highest queued bid" + (" (the k-th price)" if kth_price else ""))
            ax.legend(loc="upper right", fontsize=8)
        elif key == "utilisation":
            ax.fill_between(x, series[key], step="post", alpha=0.6)
            ax.set_ylim(0, 1.05)
        else:
            ax.step(x, series[key], where="post")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(f"{unit_name} since the first submission (bins of {width:.3g} {unit_name[0]}, time-averaged)")
    axes[-1, 0].set_xlim(x[0] if len(x) else 0, (x[-1] + width) if len(x) else 1)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def slowdown_by_band(table, title: str = ""):
    """Mean and median bounded slowdown of completed jobs per value band (Shudler et al. (2010)'s
    bands low/middle/high), with the number of jobs on each bar."""
    plt = pyplot()
    from marketsched.analysis.metrics import VALUE_BANDS

    done = table[table["state"].astype(str) == "completed"]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    if "value_band" not in done:
        raise ValueError("the results have no value_band column (no true values): nothing to group by")
    bands = [b for b in VALUE_BANDS if (done["value_band"] == b).any()]
    g = done.groupby("value_band")["bounded_slowdown"]
    mean, median, count = g.mean(), g.median(), g.size()
    pos = np.arange(len(bands))
    ax.bar(pos - 0.2, [mean[b] for b in bands], width=0.4, label="mean")
    ax.bar(pos + 0.2, [median[b] for b in bands], width=0.4, label="median")
    ax.set_xticks(pos, [f"{b}\n{count[b]:,} jobs" for b in bands])
    ax.set_xlabel("value band (true value per unit time: <=60, 60-120, >=120)")
    ax.set_yscale("log")
    top = max(max(mean[b] for b in bands), max(median[b] for b in bands)) if bands else 1.0
    ax.set_ylim(top=top * 6)  # room for the legend above the bars
    ax.set_ylabel("bounded slowdown (log scale)")
    ax.legend(loc="upper right", fontsize=8, ncol=2)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def save(fig, *paths) -> list[Path]:
    """Write ``fig`` to each path (.png or .svg), then close it."""
    out = []
    for path in map(Path, paths):
        if path.suffix.lstrip(".") not in FORMATS:
            raise ValueError(f"{path}: figures are written as {' or '.join(FORMATS)}")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        out.append(path)
    pyplot().close(fig)
    return out
