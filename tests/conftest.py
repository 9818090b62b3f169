"""Shared fixtures, and the markers given by file.

Markers (declared in pyproject.toml): ``live`` marks every test of the live market's files
(real processes, servers, a browser, Slurm: ``test_live_*``, ``test_slurm_*``,
``test_dayahead*``, ``test_tycoon_live``); ``slurm`` marks tests that use the ``cluster``
fixture. ``pytest -m "not live"`` is the library alone (CI runs it on the other interpreters).

``cluster`` marks every test of ``test_cluster_*`` files: the multi-node Slurm cluster of
``scripts/cluster-up.sh`` (the ``multinode`` fixture); deselected by default, not ``live``
(``.ci/run`` runs them in a stage of their own, ``pytest -m cluster -n 0``).

``accounts``: two fresh Unix accounts for the multi-user market's tests (``useradd``, removed
at the end; needs root: skipped for a normal user, a failure as root or in CI). ``open_dir``: a
folder every account may traverse, for a market whose jobs run as those accounts.

``browser``: a headless Chromium (Debian's chromium and chromium-driver, driven with selenium)
for the web pages' tests; skipped without them, a failure in CI.

Hypothesis: the ``deterministic`` profile (the same examples at every run) unless
``MARKETSCHED_HYPOTHESIS=explore`` (new examples each run; a failure prints the blob that
replays it).

``trace_path(name)``: the path of a real archive trace in the folder named by
``MARKETSCHED_TRACES`` (CI sets it to the shared traces folder). Unset variable: the test is
skipped. Set but the file missing: the test fails (a CI set-up error must not pass silently).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples at every run (a suite that passes once passes again);
# MARKETSCHED_HYPOTHESIS=explore draws new ones each run, to look for cases nobody has tried.
settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("MARKETSCHED_HYPOTHESIS", "deterministic"))

# Read once at start-up, so tests that clear the variable (to isolate the registry from the
# developer's set-up) do not hide the shared traces from trace-based tests.
TRACES_FOLDER = os.environ.get("MARKETSCHED_TRACES")

# A suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT
# ignored, and so would every process the tests start: Ctrl-C tests would then see it ignored.
# A handled signal is reset to its default in a child at exec, an ignored one is not.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# files of tests on real processes and services: marked `live` (deselected by default)
LIVE_FILES = ("test_live_", "test_slurm_", "test_dayahead", "test_tycoon_live", "test_exchange_api", "test_exchange_web",
              "test_exchange_live", "test_exchange_slurm", "test_executors_ray", "test_executors_slurm")
CLUSTER_FILES = ("test_cluster_",)  # marked `cluster` (the multi-node cluster), not `live`
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(autouse=True, scope="session")
def column_cache_of_the_session(tmp_path_factory):
    """Parsed traces go to a folder of this session, never to the developer's own cache."""
    if "MARKETSCHED_COLUMN_CACHE" not in os.environ:
        os.environ["MARKETSCHED_COLUMN_CACHE"] = str(tmp_path_factory.mktemp("column-cache"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name.startswith(LIVE_FILES):
            item.add_marker(pytest.mark.live)
        if item.path.name.startswith(CLUSTER_FILES):
            item.add_marker(pytest.mark.cluster)
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)
            item.add_marker(pytest.mark.live)


@pytest.fixture
def trace_path():
    def get(name: str) -> Path:
        folder = TRACES_FOLDER
        if not folder:
            pytest.skip("MARKETSCHED_TRACES is not set: trace-based test skipped")
        base = name if name.endswith((".swf", ".gz")) else f"{name}.swf.gz"
        path = Path(folder).expanduser() / base
        if not path.is_file():
            pytest.fail(f"MARKETSCHED_TRACES={folder} is set but {base} is not there")
        return path

    return get


@pytest.fixture(scope="module")
def cluster():
    """A running Slurm cluster (``scripts/slurm-up.sh``). Missing: skip, or fail when
    ``MARKETSCHED_SLURM=1`` (as CI sets it, so Slurm tests never skip silently there)."""
    from marketsched.platform.slurm import slurm_up

    if not slurm_up():
        if os.environ.get("MARKETSCHED_SLURM") == "1":
            pytest.fail("MARKETSCHED_SLURM=1 but Slurm does not answer (sinfo): run `bash scripts/slurm-up.sh`")
        pytest.skip("no Slurm cluster (run `bash scripts/slurm-up.sh`; MARKETSCHED_SLURM=1 makes this a failure)")
    return True


CLUSTER_NODES = 4
CLUSTER_CPUS = 2  # per node: 8 CPUs in all, as the one-host cluster


@pytest.fixture(scope="session")
def multinode_cluster():
    """The multi-node Slurm cluster (``scripts/cluster-up.sh 4``, 4 nodes x 2 CPUs, each node a
    slurmd in its own namespaces), brought up (idempotent) once per session; its node names.
    Cannot be made here (not root, no Slurm installation, namespaces refused): skip, or fail
    when ``MARKETSCHED_CLUSTER=1`` (CI sets it, so these tests never skip silently there)."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "cluster-up.sh"
    required = os.environ.get("MARKETSCHED_CLUSTER") == "1"

    def unavailable(why):
        if required:
            pytest.fail(f"MARKETSCHED_CLUSTER=1 but {why}")
        pytest.skip(f"{why} (MARKETSCHED_CLUSTER=1 makes this a failure)")

    if os.geteuid() != 0:
        unavailable("the multi-node cluster needs root (network namespaces, a bridge, the daemons)")
    if shutil.which("slurmd") is None or shutil.which("ip") is None or shutil.which("unshare") is None:
        unavailable("slurmd, ip or unshare is missing (run `bash scripts/slurm-up.sh` to install Slurm)")
    env = {**os.environ, "CLUSTER_CPUS": str(CLUSTER_CPUS)}
    p = subprocess.run(["bash", str(script), str(CLUSTER_NODES)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        unavailable(f"`bash scripts/cluster-up.sh {CLUSTER_NODES}` failed:\n{p.stderr[-3000:]}")
    return [f"node{i}" for i in range(1, CLUSTER_NODES + 1)]


@pytest.fixture(scope="module")
def multinode(multinode_cluster):
    """The multi-node cluster's node names; the module's Slurm commands address it
    (``SLURM_CONF``, restored after the module, so that tests of the one-host cluster in the
    same run never reach it)."""
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = "/etc/slurm-cluster/slurm.conf"
    try:
        yield multinode_cluster
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


# ---------------------------------------------------------------------------- Unix accounts
_ACCOUNT_SETS = 0  # account sets made in this session (each module gets its own)


def _need_root():
    if os.geteuid() == 0:
        return
    if os.environ.get("CI"):
        pytest.fail("multi-user market tests create Unix accounts and need root (CI runs as root)")
    pytest.skip("multi-user market tests create Unix accounts: run as root")


def _kill_processes_of(uids):
    """Kill (by pid) every process still running as one of the test accounts' uids."""
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if d.stat().st_uid in uids:
                os.kill(int(d.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


@pytest.fixture(scope="module")
def accounts():
    """Two fresh Unix accounts (names, each with its own group and a 0700 home)."""
    _need_root()
    if shutil.which("useradd") is None:
        pytest.fail("useradd is missing: the attack tests need it to create Unix accounts")
    homes = Path(tempfile.mkdtemp(prefix="ms-attack-homes-"))
    os.chmod(homes, 0o755)
    global _ACCOUNT_SETS
    _ACCOUNT_SETS += 1
    names = [f"msat{os.getpid() % 100000}x{_ACCOUNT_SETS}{c}" for c in "ab"]
    made = []
    try:
        for n in names:
            subprocess.run(["useradd", "-m", "-d", str(homes / n), "-s", "/bin/sh", "-U", n], check=True,
                           capture_output=True)
            made.append(n)
            os.chmod(homes / n, 0o700)
        yield names
    finally:
        uids = set()
        for n in made:
            try:
                uids.add(pwd.getpwnam(n).pw_uid)
            except KeyError:
                pass
        _kill_processes_of(uids)
        for n in made:
            subprocess.run(["userdel", "-r", "-f", n], capture_output=True)
        shutil.rmtree(homes, ignore_errors=True)


@pytest.fixture
def open_dir():
    """A folder every account may traverse (like /var/lib), so only the market's own modes
    stand between a job and the market's files (pytest's tmp_path is closed to other users)."""
    d = Path(tempfile.mkdtemp(prefix="ms-attack-"))
    os.chmod(d, 0o755)
    yield d
    from marketsched.platform.executor import kill_recorded_jobs

    kill_recorded_jobs(d / "market")
    shutil.rmtree(d, ignore_errors=True)


def _need_browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install chromium and chromium-driver (.ci/run); missing {missing}")
        pytest.skip(f"headless browser test needs Debian's chromium and chromium-driver; missing {missing}")
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.fail("selenium is a test dependency: pip install -e '.[test]'")


@pytest.fixture
def browser(tmp_path):
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,900", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
