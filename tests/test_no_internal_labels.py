"""Users cannot resolve the project's internal labels ("seed 000", "seed001 note", "DESIGN
principle 5", paths into the authors' notes): code, docs, the README and the command-line help
cite papers by author and year instead (docs/references.md lists them in full)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from marketsched.cli import main

ROOT = Path(__file__).resolve().parents[1]
LABEL = re.compile(r"seeds? ?00[0-4]|seed00[0-4]|DESIGN(\.md)? principle|notes/seed|seeds/|shared/notes"
                   # references into the implementation notes: "note section 7", "(note 8.1.2)", "note §7.2",
                   # "the note measured ...", "the note's oracle", "(note)"
                   r"|\bnotes? (section|item|§)|\bnotes? ?§|\(note [0-9]|\bnotes? [0-9]+(\.[0-9]+)+|\bnote's\b|\(note\)"
                   r"|\bthe note (measured|saw|checked|did|needed|lists|suggests|says|found|recommends|reports)\b"
                   r"|\bimplementation notes?\b",
                   re.IGNORECASE)
TEXT_SUFFIXES = {".py", ".md", ".txt", ".html", ".js", ".css", ".toml", ".cfg", ".sh"}


def labelled_lines(name: str, text: str) -> list[str]:
    """``name:line: text`` for every line of ``text`` that carries an internal label."""
    return [f"{name}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1) if LABEL.search(line)]


def shipped_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in ("src", "docs"):
        files += [p for p in sorted((ROOT / top).rglob("*")) if p.is_file() and p.suffix in TEXT_SUFFIXES]
    return files


def test_the_pattern_catches_the_labels_it_is_meant_to_catch():
    caught = ["(seed 001 ch. 5)", "seed000 note", "Seed 003 (Kang & Parkes)", "DESIGN principle 8",
              "``shared/notes/seed004.md``", "seeds 000 and 001", "DESIGN.md principle 9"]
    kept = ["Stößer (2009), ch. 5", "--seed 1", "seed 1 (uniform weights)", "SEED = 6001", "seeds=4",
            "seeds 1-4"]
    caught += ["(note section 7 item 12)", "note 8.1.2-8.1.3", "(note 8.4.17)", "exact scan (note §7.2)",
               "the note measured 14.5 s", "rejected (note's oracle)", "the 2 s rule (note).", "The note checked",
               "see the implementation notes"]
    kept += ["Note: every job is serial", "note: WSPT needs", "with the note `slurm: STATE`", "a bid's note",
             "(final state and note when a job ends)", "Notes on the sources", "repeated keys such as `Note`",
             "plan, notes = build_plan()", "the note \"reservation ended\""]
    assert [s for s in caught if not LABEL.search(s)] == []
    assert [s for s in kept if LABEL.search(s)] == []


def test_no_internal_labels_in_sources_docs_and_readme():
    hits = []
    for path in shipped_files():
        hits += labelled_lines(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8", errors="replace"))
    assert hits == [], "internal labels (cite by author and year, see docs/references.md):\n" + "\n".join(hits)


def _commands(group: click.Command, path: tuple[str, ...] = ()):
    yield path, group
    if isinstance(group, click.Group):
        for name in sorted(group.list_commands(click.Context(group))):
            yield from _commands(group.get_command(click.Context(group), name), path + (name,))


def test_no_internal_labels_in_the_command_line_help():
    from click.testing import CliRunner

    runner = CliRunner()
    hits = []
    checked = 0
    for path, _ in _commands(main):
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        hits += labelled_lines("marketsched " + " ".join(path) + " --help", result.output)
        checked += 1
    assert checked > 10  # the walk reached the subcommands
    assert hits == [], "internal labels in CLI help:\n" + "\n".join(hits)


def test_references_cite_each_source_paper_once():
    refs = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    for key in ("Shudler et al. (2010)", "Stößer (2009)", "Mutz (2008)", "Kang & Parkes (2007)",
                "Feldman, Lai & Zhang (2005)"):
        assert refs.count(f"| {key} |") == 1, key


@pytest.mark.parametrize("text,expected", [("a\nseed 002 ch. 5\nb", ["x:2: seed 002 ch. 5"]), ("Mutz (2008)", [])])
def test_labelled_lines_names_file_and_line(text, expected):
    assert labelled_lines("x", text) == expected
