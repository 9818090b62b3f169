"""Command-line output: rich on a terminal, plain text elsewhere.

Importing rich costs about a tenth of a second, as much as a whole simulation of a
50,000-job trace, and off a terminal (a pipe, a file, a CI log) it draws nothing a plain
writer cannot. So the commands ask :func:`rich_console` first: it imports rich only when the
stream may be a terminal, and rich decides (its own rules: ``TTY_COMPATIBLE``,
``FORCE_COLOR``, ``isatty``). A results table is described once (:class:`TextTable`) and
drawn by rich on a terminal or by :meth:`TextTable.plain` elsewhere, which lays it out as
rich does off a terminal (rich's ``SIMPLE_HEAD`` box, the title wrapped to the table's width),
except that it never narrows a column to fit the console: a file keeps every label whole.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

WIDTH = 100  # pipes and CI logs: 100 columns, as the tables and legends are laid out


def may_be_terminal(stream) -> bool:
    """False when rich would certainly not treat ``stream`` as a terminal (so it need not be
    imported to ask): no ``TTY_COMPATIBLE=1``, no non-empty ``FORCE_COLOR``, not a tty."""
    env = os.environ
    if env.get("TTY_COMPATIBLE") == "0":
        return False
    if env.get("TTY_COMPATIBLE") == "1" or env.get("FORCE_COLOR"):
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


def rich_console(stream=None, min_width: int = WIDTH):
    """A rich Console on ``stream`` (default stdout) at least ``min_width`` wide, or None when
    the stream is not a terminal."""
    stream = stream or sys.stdout
    if not may_be_terminal(stream):
        return None
    from rich.console import Console

    console = Console(file=stream)
    if not console.is_terminal:
        return None
    if console.width < min_width:
        console = Console(file=stream, width=min_width)
    return console


@dataclass
class TextTable:
    """A table of text cells in sections, with a title. ``columns``: ``(header, justify,
    min_width)`` with justify ``"left"`` or ``"right"``; a row is a list of cells, or a heading
    (a ``str``: shown bold in the first column, the others empty)."""

    title: str
    columns: list[tuple[str, str, int]]
    sections: list[list] = field(default_factory=list)

    def rich(self):
        """The table as a :class:`rich.table.Table`."""
        from rich import box
        from rich.table import Table
        from rich.text import Text

        table = Table(title=Text(self.title, style="table.title"), box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0),
                      title_justify="left")
        for head, justify, min_width in self.columns:
            table.add_column(Text(head), justify=justify, no_wrap=True, min_width=min_width)  # type: ignore[arg-type]
        for i, section in enumerate(self.sections):
            for row in section:  # Text, not markup: a label shows as written, brackets and colons too
                if isinstance(row, str):
                    table.add_row(Text(row, style="bold"), *[""] * (len(self.columns) - 1))
                else:
                    table.add_row(*map(Text, row))
            if i < len(self.sections) - 1:
                table.add_section()
        return table

    def plain(self) -> str:
        """The table as rich draws it off a terminal, when it fits (lines end with spaces)."""
        rows = [[row, *[""] * (len(self.columns) - 1)] if isinstance(row, str) else list(row)
                for section in self.sections for row in section]
        widths = [max(min_width, len(head), *(len(r[i]) for r in rows))
                  for i, (head, _, min_width) in enumerate(self.columns)]
        total = 2 + sum(w + 1 for w in widths) + len(widths) - 1

        def line(cells) -> str:
            out = [(c.rjust(w) if justify == "right" else c.ljust(w)) + " "
                   for c, w, (_, justify, _) in zip(cells, widths, self.columns)]
            return " " + " ".join(out) + " "

        blank = " " * total
        out = _wrap(self.title, total) if self.title else []
        out += [blank, line([head for head, _, _ in self.columns]), " " + "─".join("─" * (w + 1) for w in widths) + " "]
        ends = set()  # rows closing a section (as rich's add_section marks the last row added)
        for i in range(len(self.sections) - 1):
            if any(self.sections[: i + 1]):
                ends.add(sum(map(len, self.sections[: i + 1])) - 1)
        for k, row in enumerate(rows):
            out.append(line(row))
            if k in ends and k < len(rows) - 1:
                out.append(blank)
        out.append(blank)
        return "\n".join(out) + "\n"


_WORD = re.compile(r"\s*\S+\s*")


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of ``width`` characters, broken where rich breaks it: a word keeps the
    spaces after it, a word longer than a line is cut into lines (rich's ``divide_line``), then
    spaces past the width are dropped and each line is cut or padded to the width."""
    breaks: list[int] = []
    offset = 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group()
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            chunks = [word[i:i + width] for i in range(0, len(word), width)]
            for k, chunk in enumerate(chunks):
                if start:
                    breaks.append(start)
                if k == len(chunks) - 1:
                    offset = len(chunk)
                else:
                    start += len(chunk)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    lines = []
    for a, b in zip([0, *breaks], [*breaks, len(text)]):
        line = text[a:b]
        if len(line) > width:
            line = line[:len(line) - min(len(line) - len(line.rstrip()), len(line) - width)]
        lines.append(line[:width].ljust(width))
    return lines
