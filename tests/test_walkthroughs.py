"""The plain walkthroughs of README.md and the docs (``<!-- walkthrough -->`` blocks; the live
market's are in ``test_live_walkthroughs``) run as written, in bash, in a fresh folder, and
end with status 0 (``bash -e``: any failing command fails it)."""

from __future__ import annotations

import subprocess

import pytest

from walkthroughs import environment, walkthroughs

PLAIN = walkthroughs(None)


def test_the_plain_walkthroughs_are_found():
    assert [where.split(":")[0] for where, _ in PLAIN] == ["README.md"]


@pytest.mark.parametrize("where,script", PLAIN, ids=[w for w, _ in PLAIN])
def test_walkthrough(where, script, tmp_path):
    out = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=environment(), capture_output=True, text=True,
                         timeout=1800, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, f"{where} failed ({out.returncode}):\n{(out.stdout + out.stderr)[-4000:]}"
    assert "Traceback" not in out.stderr
