"""What a plain ``marketsched simulate`` process imports: NumPy and the engine, none of the heavy
libraries other commands need (data frames, plots, clusters, web servers). A property of the
process, checked on ``sys.modules`` in a fresh interpreter, not a timing."""

import os
import subprocess
import sys

import pytest

#: Modules a plain simulation never needs; each costs tens to hundreds of milliseconds to import.
HEAVY = ("pandas", "matplotlib", "scipy", "ray", "fastapi", "starlette", "uvicorn", "pyarrow", "rich",
         "sqlalchemy", "pydantic", "plotly", "sklearn")

#: Run the command line in this interpreter, then print the top-level names of every module loaded.
CODE = """
import sys
from marketsched.cli import main
try:
    main(["simulate", *sys.argv[1:]])
except SystemExit as e:
    if e.code:
        raise
print("LOADED", " ".join(sorted({m.partition(".")[0] for m in sys.modules})))
print("MODULES", " ".join(sorted(sys.modules)))
"""

SWF = """; three jobs: id submit wait run alloc cpu mem req_procs req_time req_mem status user group app queue part prev think
1 0 0 10 2 -1 -1 2 20 -1 1 1 1 -1 1 -1 -1 -1
2 5 0 30 4 -1 -1 4 40 -1 1 1 1 -1 1 -1 -1 -1
3 6 0 5 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1
"""


def loaded_by_simulate(args: list[str], env_extra: dict[str, str], what: str = "LOADED") -> set[str]:
    """The top-level names of the modules a ``simulate`` process loaded (``what="MODULES"``: the
    modules' full names)."""
    env = {**os.environ, **env_extra}
    out = subprocess.run([sys.executable, "-c", CODE, *args], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith(what + " "))
    return set(line.split()[1:])


@pytest.mark.parametrize("args", [
    [],  # the built-in workload, the default mechanism
    ["--mechanism", "easy", "--trace", "{swf}"],
    ["--mechanism", "hb", "--trace", "{swf}", "--split", "--param", "pricing=first"],
    ["--mechanism", "ees", "--synthetic-jobs", "200"],
], ids=["builtin", "easy-trace", "hb-split-trace", "ees"])
def test_a_plain_simulate_imports_none_of_the_heavy_modules(args, tmp_path):
    swf = tmp_path / "three.swf"
    swf.write_text(SWF)
    loaded = loaded_by_simulate([a.format(swf=swf) for a in args], {"MARKETSCHED_COLUMN_CACHE": str(tmp_path / "cache")})
    assert "numpy" in loaded and "marketsched" in loaded  # it did run the simulation
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))



def test_a_simulation_from_cached_columns_imports_neither_gzip_nor_the_workload_generator(tmp_path):
    """A gzipped trace is parsed once (gzip imported), then read from the column cache: that
    process needs neither gzip nor the synthetic workload generator (it simulates a trace)."""
    import gzip

    swf = tmp_path / "three.swf.gz"
    swf.write_bytes(gzip.compress(SWF.encode()))
    args = ["--mechanism", "fcfs", "--trace", str(swf)]
    env = {"MARKETSCHED_COLUMN_CACHE": str(tmp_path / "cache")}
    assert "gzip" in loaded_by_simulate(args, env, "MODULES")  # parsed: the check below can fail
    cached = loaded_by_simulate(args, env, "MODULES")
    assert "marketsched.engine.simulator" in cached  # it did run the simulation
    assert not cached & {"gzip", "marketsched.workloads.synthetic"}, sorted(cached & {"gzip", "marketsched.workloads.synthetic"})
