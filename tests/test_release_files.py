"""Release files agree on one version: pyproject.toml (the source), the installed package,
CITATION.cff and the newest dated entry of CHANGELOG.md."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import marketsched

ROOT = Path(__file__).resolve().parents[1]


def test_one_version_everywhere():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert marketsched.__version__ == version, "reinstall (pip install -e .) after changing the version"
    cff = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert re.search(r"^version: \"?([^\"\n]+)\"?$", cff, re.M).group(1) == version
    assert re.search(r"^cff-version: 1\.2\.0$", cff, re.M)
    dated = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert dated and dated[0] == version


def test_license_is_the_declared_mit():
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
