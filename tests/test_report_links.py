"""A report links nothing missing: written under results/NAME (no index above it) its link to
the verdict rule points at verdicts.md written beside it; under docs/reproductions/NAME it
keeps pointing at the index's section."""

from __future__ import annotations

import re
from pathlib import Path

from marketsched.experiments.report import Report

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _write(out: Path) -> str:
    rep = Report(out, "A reproduction")
    rep.text("Verdicts follow [How verdicts are decided](../README.md#how-verdicts-are-decided).")
    return rep.write().read_text()


def _targets(folder: Path, text: str) -> list[Path]:
    return [folder / m.group(1) for m in LINK.finditer(text) if "://" not in m.group(1)]


def test_a_report_under_results_links_the_rule_written_beside_it(tmp_path):
    out = tmp_path / "results" / "feldman2005"
    text = _write(out)
    targets = _targets(out, text)
    assert targets and all(t.is_file() for t in targets), targets
    assert "](verdicts.md)" in text
    assert (out / "verdicts.md").read_text().startswith("# How verdicts are decided\n\n")


def test_a_report_beside_the_index_keeps_its_link(tmp_path):
    docs = tmp_path / "docs" / "reproductions"
    docs.mkdir(parents=True)
    (docs / "README.md").write_text("# Reproductions\n\n## How verdicts are decided\n\nThe rule.\n")
    text = _write(docs / "feldman2005")
    assert "](../README.md#how-verdicts-are-decided)" in text and not (docs / "feldman2005" / "verdicts.md").exists()
