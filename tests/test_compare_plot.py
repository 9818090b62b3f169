"""compare --plot: per mechanism, slowdown and utility per value band, side by side."""

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from marketsched.analysis.compare_plot import compare_figure
from marketsched.cli import main


def table(bsd, utility, band, state="completed"):
    t = pd.DataFrame({"bounded_slowdown": bsd, "utility": utility, "value_band": band})
    t["state"] = state
    return t


def test_one_box_per_run_and_band_with_data_and_none_without_utility():
    a = table([1.0, 2.0, 3.0, 4.0], [-1.0, -2.0, -3.0, -4.0], ["low", "low", "high", "high"])
    b = table([1.0, 5.0], [np.nan, np.nan], ["low", "middle"]).drop(columns="utility")  # a queue: no utility
    c = table([2.0, 2.0], [1.0, 2.0], ["high", "high"], state="discarded")  # nothing completed
    fig = compare_figure([("a", a), ("b", b), ("c", c)], "title")
    left, right = fig.axes[:2]
    assert [t.get_text() for t in left.get_yticklabels()] == ["a", "b", "c"]
    # left: completed jobs only: a low, a high, b low, b middle; right: a low, a high, c high
    assert len(left.patches) == 4 and len(right.patches) == 3
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_a_run_without_value_bands_is_named():
    with pytest.raises(ValueError, match="run 'x' has no column 'value_band'"):
        compare_figure([("x", pd.DataFrame({"state": [], "bounded_slowdown": []}))])
    with pytest.raises(ValueError, match="no runs"):
        compare_figure([])


def test_cli_writes_the_figure(tmp_path):
    out = tmp_path / "cmp.png"
    r = CliRunner().invoke(main, ["compare", "--synthetic-jobs", "150", "--synthetic-nodes", "8", "--mechanisms",
                                  "hb,ees,fcfs", "--pricings", "kth", "--param", "ees.n_draws=10", "--no-legend",
                                  "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "figure: " in r.stderr
    bad = CliRunner().invoke(main, ["compare", "--synthetic-jobs", "20", "--plot", str(tmp_path / "x.pdf")])
    assert bad.exit_code == 2 and "--plot" in bad.output and ".png or .svg" in bad.output
