"""The documentation site keeps a docstring's dollar signs ($MARKETSCHED_TRACES ...): the
markdown extensions of mkdocs.yml treat ``\\( \\)`` and ``\\[ \\]`` as math, never ``$``
(which once ate the text between two environment variables on the workloads API page).
Needs the docs extra (pip install -e '.[docs]'); skipped without it."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _markdown():
    markdown = pytest.importorskip("markdown")
    pytest.importorskip("pymdownx")
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    names, configs = [], {}
    for ext in config["markdown_extensions"]:
        name, options = next(iter(ext.items())) if isinstance(ext, dict) else (ext, None)
        names.append(name)
        if options:
            configs[name] = options
    return markdown.Markdown(extensions=names, extension_configs=configs)


def test_the_traces_docstring_keeps_its_dollar_signs():
    from marketsched.workloads.cli import traces

    html = _markdown().convert(inspect.getdoc(traces.callback))
    for var in ("$MARKETSCHED_TRACES", "$MARKETSCHED_CACHE", "$MARKETSCHED_COLUMN_CACHE"):
        assert var in html, var
    assert "arithmatex" not in html


def test_math_in_round_brackets_is_still_math():
    html = _markdown().convert(r"a cost \(w \cdot f\) and $A or $B")
    assert "arithmatex" in html and "$A or $B" in html
