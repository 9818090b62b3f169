"""One picture of a comparison: per mechanism, slowdown and utility per value band, side by side.

``marketsched compare --plot FILE`` draws it from the runs of the table: each run is a row,
each of Shudler et al. (2010)'s value bands (low, middle, high; section IV) a box in that row.

Steps of :func:`compare_figure`:

1. take each run's per-job table (:func:`marketsched.results.job_table_of`, the run's own jobs
   in its form: split copies count as jobs, as in the table's ``done``);
2. left panel: the bounded slowdown of the completed jobs (log scale), a box per value band
   (quartiles, whiskers at the 5th and 95th percentiles, no outliers drawn);
3. right panel: the mechanism's own per-job utility over every job, completed or not (symmetric
   log scale: utilities are negative in the priority and compensation markets and positive in
   the others; they compare within a kind of mechanism only, as in the table's legend); none
   for a queue without a market (FCFS, EASY), as in the table;
4. rows in the table's order, the run's label on the left, the bands' colours in a legend at
   the top.
"""

from __future__ import annotations

import numpy as np

#: box colours of the value bands
BAND_COLOURS = {"low": "#4c72b0", "middle": "#dd8452", "high": "#55a868"}
BAND_TEXT = {"low": "w <= 60", "middle": "60 < w < 120", "high": "w >= 120"}  # metrics.value_band
WHISKERS = (5, 95)


def compare_figure(tables, title: str = ""):
    """The figure of ``tables``: a list of ``(label, per-job table)`` pairs (module docstring).

    A table needs the columns ``state``, ``bounded_slowdown`` and ``value_band`` (``job_table_of``
    with true values; ``ValueError`` names the first run that lacks one); a run without a
    ``utility`` column (a queue without a market: no bids, no payments) has no boxes on the right."""
    from marketsched.analysis.metrics import VALUE_BANDS
    from marketsched.analysis.plots import pyplot

    if not tables:
        raise ValueError("compare_figure: no runs to draw")
    for label, t in tables:
        lacking = [c for c in ("state", "bounded_slowdown", "value_band") if c not in t]
        if lacking:
            raise ValueError(f"compare_figure: run {label!r} has no column {lacking[0]!r} (no true values?)")
    plt = pyplot()
    import matplotlib

    # matplotlib 3.10 renamed vert=False (deprecated since) to orientation="horizontal"
    major, minor = (int(x) for x in matplotlib.__version__.split(".")[:2])
    horizontal = {"orientation": "horizontal"} if (major, minor) >= (3, 10) else {"vert": False}
    n = len(tables)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 1.2 + 0.42 * n), dpi=110, sharey=True)
    bands = [b for b in VALUE_BANDS if any((t["value_band"] == b).any() for _, t in tables)]
    width = 0.8 / max(1, len(bands))
    for i, band in enumerate(bands):
        offset = (i - (len(bands) - 1) / 2) * width
        for ax, column, completed_only in ((left, "bounded_slowdown", True), (right, "utility", False)):
            data, pos = [], []
            for row, (_, t) in enumerate(tables):
                if column not in t:
                    continue
                sel = t["value_band"] == band
                if completed_only:
                    sel &= t["state"].astype(str) == "completed"
                x = t.loc[sel, column].to_numpy(dtype=np.float64)
                x = x[np.isfinite(x)]
                if len(x):
                    data.append(x)
                    pos.append(row + offset)
            if data:
                box = ax.boxplot(data, positions=pos, **horizontal, widths=width * 0.9, whis=WHISKERS,
                                 showfliers=False, patch_artist=True, manage_ticks=False)
                for patch in box["boxes"]:
                    patch.set_facecolor(BAND_COLOURS.get(band, "#999999"))
                    patch.set_alpha(0.8)
                for median in box["medians"]:
                    median.set_color("black")
    handles = [plt.Rectangle((0, 0), 1, 1, color=BAND_COLOURS.get(b, "#999999"), alpha=0.8) for b in bands]
    fig.legend(handles, [f"{b} value ({BAND_TEXT[b]})" for b in bands], loc="upper center", ncol=len(bands),
               fontsize=8, bbox_to_anchor=(0.5, 1.0 - 0.35 / fig.get_figheight()), frameon=False)
    left.set_yticks(np.arange(n), [label for label, _ in tables])
    left.set_ylim(n - 0.5, -0.5)
    left.set_xscale("log")
    left.set_xlabel("bounded slowdown of completed jobs (log scale)")
    right.set_xscale("symlog", linthresh=1.0)
    from matplotlib.ticker import SymmetricalLogLocator

    # a tick every second decade: one per decade from -1e6 to 1e7 overlaps at the figure's width
    right.xaxis.set_major_locator(SymmetricalLogLocator(base=100.0, linthresh=1.0))
    right.set_xlabel("utility per job, the mechanism's own model (symmetric log scale)")
    right.axvline(0.0, color="grey", lw=0.6)
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.55 / fig.get_figheight()))
    return fig
