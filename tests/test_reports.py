"""Reports never drift from their code: every report writer is run on stored results.

* Committed reports: ``docs/reproductions/NAME/report.md`` is rewritten from its stored results
  (``docs/reproductions/NAME/results``) into a temporary folder and must equal the committed text.
* Quick results: with ``MARKETSCHED_QUICK_RESULTS`` set to a folder holding ``NAME/`` outputs of
  ``marketsched reproduce NAME --quick --out FOLDER/NAME`` (``.ci/run`` makes them in a separate
  step), every writer rewrites its quick report from ``NAME/results`` and must give the same text
  as the run did, with a scoreboard line and a claims table (counting claims of its paper, none for an
  extension such as mutz-trace).
* The scoreboard of ``docs/reproductions/README.md`` equals the counts of the committed reports,
  and its statement of the verdict rule equals :func:`marketsched.analysis.verdicts.rule_markdown`.

The rewrites draw every report's figures anew (minutes of CPU in all): they are marked
``reproduce`` (``pytest -m reproduce``; .ci/run runs them as a gate).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pytest

from marketsched import experiments
from marketsched.analysis import verdicts as V
from marketsched.experiments.report import scoreboard_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reproductions"
QUICK = os.environ.get("MARKETSCHED_QUICK_RESULTS")
FOUND = experiments.available()


def _committed():
    return sorted(p.parent.name for p in DOCS.glob("*/results") if p.is_dir())


def test_every_experiment_has_a_report_writer():
    for name, module in FOUND.items():
        assert callable(getattr(module, "write_report", None)), f"{name}: no write_report(results, out_dir)"


@pytest.mark.reproduce  # each report's figures are drawn anew: minutes of CPU in all
@pytest.mark.parametrize("name", _committed())
def test_committed_report_is_what_its_writer_makes_of_its_stored_results(name, tmp_path):
    module = FOUND[name]
    module.write_report(DOCS / name / "results", tmp_path)
    committed = (DOCS / name / "report.md").read_text()
    assert (tmp_path / "report.md").read_text() == committed, (
        f"docs/reproductions/{name}/report.md differs from what the writer makes of its stored results: run "
        f"`marketsched reproduce {name} --report-only --results docs/reproductions/{name}/results "
        f"--out docs/reproductions/{name}`")
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "claims.csv"), pd.read_csv(DOCS / name / "claims.csv"))


@pytest.mark.reproduce
@pytest.mark.skipif(not QUICK, reason="MARKETSCHED_QUICK_RESULTS is not set (.ci/run sets it after the quick runs)")
@pytest.mark.parametrize("name", sorted(FOUND))
def test_quick_report_rewrites_identically_from_its_results(name, tmp_path):
    run_dir = Path(QUICK) / name
    if not (run_dir / "results").is_dir():
        pytest.fail(f"MARKETSCHED_QUICK_RESULTS={QUICK} has no {name}/results: run "
                    f"`marketsched reproduce {name} --quick --out {run_dir}` first")
    FOUND[name].write_report(run_dir / "results", tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert text == (run_dir / "report.md").read_text()
    assert re.search(r"^\*\*Scoreboard: \d+ claims: ", text, re.M), "no scoreboard line under the title"
    claims = pd.read_csv(tmp_path / "claims.csv")
    assert set(claims.verdict) <= set(V.VERDICTS)
    if getattr(FOUND[name], "EXTENSION", False):
        assert not claims.counted.any(), "an extension counts no claim of the paper"
    else:
        assert claims.counted.any(), "no counted claim of the paper"


def test_scoreboard_and_rule_in_the_readme_are_current():
    readme = (DOCS / "README.md").read_text()
    assert V.rule_markdown() in readme, "docs/reproductions/README.md: the verdict rule is not the generated one"
    assert scoreboard_markdown(DOCS) in readme, (
        "docs/reproductions/README.md: the scoreboard (after) is not the one the committed claims.csv files give; "
        "print marketsched.experiments.report.scoreboard_markdown('docs/reproductions') and paste it")
