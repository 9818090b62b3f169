"""MkDocs hooks (``hooks:`` in mkdocs.yml): the site's home page is the README.

The README links to ``docs/X.md`` (right on the repository's front page); on the site those
pages are ``X.md``. Links to other repository files (``benchmarks/README.md``) are not part of
the site and become plain text naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


def site_links(text: str) -> str:
    """The README's markdown with its links rewritten for a page at the site's root."""

    def fix(m: re.Match[str]) -> str:
        label, target = m.groups()
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return m.group(0)  # an address or an anchor
        if target.startswith("docs/"):
            target = target.removeprefix("docs/")
            return f"[{label}]({target + 'README.md' if target.endswith('/') else target})"  # a folder's page
        return f"`{target}`" if label == target else f"{label} (`{target}`)"

    return _LINK.sub(fix, text)


def on_files(files: Files, config) -> Files:
    readme = Path(config.config_file_path).parent / "README.md"
    files.append(File.generated(config, "index.md", content=site_links(readme.read_text(encoding="utf-8"))))
    return files
