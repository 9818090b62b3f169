"""Rewriting the committed Shudler et al. (2010) report from its stored results raises no
pandas deprecation (a pandas-4 removal once warned on every report: DataFrame.join's
lsuffix/rsuffix). About 10 CPU seconds: marked ``reproduce``."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.reproduce
def test_the_shudler2010_report_is_written_without_a_pandas_deprecation(tmp_path):
    import pandas.errors as pe

    from marketsched.experiments import shudler2010

    with warnings.catch_warnings():
        kinds = [getattr(pe, n) for n in ("Pandas4Warning", "Pandas5Warning") if hasattr(pe, n)]  # pandas >= 3
        for kind in (*kinds, FutureWarning, DeprecationWarning):
            warnings.simplefilter("error", kind)
        path = shudler2010.write_report(ROOT / "docs" / "reproductions" / "shudler2010" / "results", tmp_path)
    assert path.is_file()
