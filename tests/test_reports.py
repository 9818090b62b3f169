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
    out = tmp_path / name  # laid out as docs/reproductions: the index beside the report's folder, whose
    out.mkdir()  # rule the report links (report.Report._local_links)
    (tmp_path / "README.md").write_text((DOCS / "README.md").read_text())
    module.write_report(DOCS / name / "results", out)
    committed = (DOCS / name / "report.md").read_text()
    assert (out / "report.md").read_text() == committed, (
        f"docs/reproductions/{name}/report.md differs from what the writer makes of its stored results: run "
        f"`marketsched reproduce {name} --report-only --results docs/reproductions/{name}/results "
        f"--out docs/reproductions/{name}`")
    pd.testing.assert_frame_equal(pd.read_csv(out / "claims.csv"), pd.read_csv(DOCS / name / "claims.csv"))


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


# every reproduction of a paper lists the paper's statements (docs/reproductions/NAME/checklist.csv); an
# extension (mutz-trace) counts no claim of its paper, whose statements the paper's own report lists
CHECKLISTS = tuple(name for name in _committed() if not getattr(FOUND[name], "EXTENSION", False))


def test_every_reproduction_of_a_paper_has_a_checklist():
    assert {"shudler2010", "mutz", "stoesser-ch3-4", "stoesser-ch5", "stoesser-ch6", "kang2007",
            "feldman2005"} <= set(CHECKLISTS)
    missing = [name for name in CHECKLISTS if not (DOCS / name / "checklist.csv").is_file()]
    assert not missing, f"reproductions without a checklist of their paper's statements: {missing}"


def _checklist_gaps(checklist: pd.DataFrame, claims: pd.DataFrame) -> list[str]:
    """Entries of a checklist with neither a row of the paper's claims (``where`` equal or followed by a comma,
    ``claim`` inside the row's claim) nor a documented exclusion; entries with both are gaps too."""
    paper = claims[claims["counted_v1"]]  # the paper's rows, settings included (never our own comparisons)
    gaps = []
    for e in checklist.itertuples():
        hit = bool(e.where) and any((w == e.where or w.startswith(e.where + ",")) and e.claim.lower() in c.lower()
                                    for w, c in zip(paper["where"], paper["claim"]))
        if hit == bool(e.exclusion.strip()):
            gaps.append(f"line {e.line}: {e.statement!r} " + ("has a row and an exclusion" if hit else
                                                               "has no row in claims.csv and no documented exclusion"))
    return gaps


@pytest.mark.parametrize("name", CHECKLISTS)
def test_every_statement_of_the_checklist_has_a_row_or_a_documented_exclusion(name):
    checklist = pd.read_csv(DOCS / name / "checklist.csv", dtype=str, keep_default_na=False)
    assert list(checklist.columns) == ["line", "statement", "where", "claim", "exclusion"]
    assert checklist["line"].str.fullmatch(r"\d+").all(), "every statement names its line in the paper"
    assert checklist["line"].astype(int).is_monotonic_increasing, "statements in the order of the paper"
    assert not (gaps := _checklist_gaps(checklist, pd.read_csv(DOCS / name / "claims.csv"))), "\n".join(gaps)


def test_a_checklist_entry_without_a_row_is_found():
    claims = pd.DataFrame({"where": ["Fig 2", "Table II, HB, 5%"], "claim": ["low-bid jobs: BSD higher", "x"],
                           "counted_v1": [True, True]})
    entries = pd.DataFrame({"line": ["1", "2", "3", "4", "5"], "statement": list("abcde"),
                            "where": ["Fig 2", "Fig 3", "Table II", "Table I", ""],
                            "claim": ["BSD higher", "BSD higher", "x", "x", ""],
                            "exclusion": ["", "", "", "", "a remark"]})
    gaps = _checklist_gaps(entries, claims)
    assert [g.split(":")[0] for g in gaps] == ["line 2", "line 4"]  # Fig 3 has no row; "Table I" is not "Table II"
    ours = claims.assign(counted_v1=False)  # our own comparisons do not count a statement of the paper
    assert len(_checklist_gaps(entries, ours)) == 4


def test_scoreboard_and_rule_in_the_readme_are_current():
    readme = (DOCS / "README.md").read_text()
    assert V.rule_markdown() in readme, "docs/reproductions/README.md: the verdict rule is not the generated one"
    assert scoreboard_markdown(DOCS) in readme, (
        "docs/reproductions/README.md: the scoreboard (after) is not the one the committed claims.csv files give; "
        "print marketsched.experiments.report.scoreboard_markdown('docs/reproductions') and paste it")


def test_every_report_with_a_difference_is_in_the_open_differences():
    readme = (DOCS / "README.md").read_text()
    assert "## Open differences" in readme
    listed = set(re.findall(r"^### (\S+)$", readme.split("## Open differences", 1)[1], re.M))
    differ = {p.parent.name for p in DOCS.glob("*/claims.csv")
              if ((df := pd.read_csv(p))["counted"] & (df["verdict"] == V.DIFFERS)).any()}
    assert differ <= listed, f"reports with a difference missing under 'Open differences': {sorted(differ - listed)}"

