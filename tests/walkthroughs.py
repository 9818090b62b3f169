"""The walkthroughs of README.md and the docs: the ``bash`` blocks that follow a
``<!-- walkthrough -->`` comment (``<!-- walkthrough: live -->`` for one that starts the live
market), as written, for the tests that run them (``test_walkthroughs``,
``test_live_walkthroughs``)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = re.compile(r"^<!-- walkthrough(?::\s*(?P<kind>[\w-]+))? -->\n```bash\n(?P<script>.*?)^```$", re.S | re.M)


def walkthroughs(kind: str | None) -> list[tuple[str, str]]:
    """``(where, script)`` of every walkthrough of that kind (None: the plain ones) in README.md
    and docs/**/*.md, ``where`` as ``FILE:LINE``."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for m in MARK.finditer(text):
            if m.group("kind") == kind:
                out.append((f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}", m.group("script")))
    return out


def environment(home: str | None = None) -> dict[str, str]:
    """A new user's environment: this interpreter's ``marketsched`` first on PATH, none of the
    variables that point the commands elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARKETSCHED_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    if home is not None:
        env["HOME"] = home
    return env
