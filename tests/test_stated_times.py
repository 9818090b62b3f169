"""Times a user reads (README.md and every command's --help) are CPU seconds on a stated
machine or relative to another command, never a bare wall time such as "about a minute"."""

from __future__ import annotations

import re
from pathlib import Path

import click
from click.testing import CliRunner

from marketsched.cli import main

ROOT = Path(__file__).resolve().parent.parent
BARE = re.compile(r"\b(?:in|takes?|finish(?:es)?(?: in)?|within)\s+(?:about\s+|~)?(?:a|one|two|a few|\d+)\s+"
                  r"(?:minutes?|seconds?|hours?|s|min)\b(?!\s*(?:of CPU|CPU))|\bidle cores\b|\bin one minute\b",
                  re.IGNORECASE)


def _helps(group: click.Group, ctx: click.Context, path: list[str]):
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx)
        yield [*path, name], cmd.get_help(sub)
        if isinstance(cmd, click.Group):
            yield from _helps(cmd, sub, [*path, name])


def test_the_pattern_finds_bare_wall_times():
    for text in ("Reduced grid that finishes in about a minute.", "86 s on 2 idle cores", "## A live market in one minute",
                 "it takes about 2 minutes"):
        assert BARE.search(text), text
    assert not BARE.search("--quick: 20-150 CPU seconds, as measured on a 2-core machine")


def test_no_help_text_states_a_bare_wall_time():
    ctx = click.Context(main, info_name="marketsched")
    found = {" ".join(path): m.group(0) for path, text in _helps(main, ctx, []) if (m := BARE.search(" ".join(text.split())))}
    assert found == {}
    assert CliRunner().invoke(main, ["--help"]).exit_code == 0


def test_the_readme_states_no_bare_wall_time():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [m.group(0) for m in BARE.finditer(" ".join(text.split()))] == []
