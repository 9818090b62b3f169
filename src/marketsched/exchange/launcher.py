"""``exchange run --service-user ACCOUNT``: the exchange as a service account, its contract jobs
started by a privileged launcher.

As the live market's broker (:mod:`marketsched.platform.launcherd`, ``market serve
--service-user``), the exchange started as root splits in two (:func:`start_launcher`):

1. it checks the data folder: it must belong to ``ACCOUNT`` already (``chown -R ACCOUNT: DATA``,
   or set the exchange up as ``ACCOUNT``): root never works inside a folder the service account
   controls;
2. it spawns the launcher (root), which serves ``DATA/providers`` with what is fixed at its
   start: the CPUs contracts may be given (the online CPUs in the launcher's own CPU set), the
   memory ceiling of one job (the machine's memory), the process limit (:data:`JOB_PROCESSES`),
   and the database it reads the user mapping from (``ex_unix``, with the service account's
   rights);
3. it drops to ``ACCOUNT`` for good (real, effective, saved and filesystem uids, groups) and
   clears, runs and settles as in root mode, each local provider's executor sending its starts,
   goes, kills and reads to the launcher (:class:`ProviderLauncherExecutor`).

What the launcher checks, beyond the live market's launcher's checks (a job named by its
contract id, never a path; an account that exists, is neither root nor the service account, is
an ordinary account and is mapped to an exchange user; the environment):

* every request names a provider, checked again as the exchange checks names (1-64 letters,
  digits, ``_``, ``.``, ``-``, starting with a letter or digit: never ``.``, ``..`` nor a path);
  its jobs' folder is the launcher's own ``DATA/providers/NAME``, which must belong to the
  service account;
* a start carries the contract's limits: a cpuset within the CPUs fixed at the launcher's
  start, a CPU quota above 0 and at most the cpuset's width, a memory limit from 1 byte to the
  ceiling; the process limit is the launcher's. Anything else is refused, and the launcher goes
  on.

Slurm providers are not run in this mode (``sbatch --uid`` and ``scancel`` of another account's
job need root): ``exchange run --service-user`` refuses to start while one has joined, and the
contracts of one that joins later lapse with a note (the exchange's doing: no penalty).
"""

from __future__ import annotations

import math
import os
import pwd
import stat
import sys
from dataclasses import replace
from pathlib import Path

from marketsched.platform.cgroups import JobCgroup, Layout
from marketsched.platform.executor import JobLimits, LocalExecutor, Proc, market_cgroup_name
from marketsched.platform.launcherd import (
    REQUESTS,
    LauncherClient,
    LauncherExecutor,
    LauncherService,
    Refused,
    drop_privileges,
    main,
    service_account,
    spawn,
)

from .orders import check_name
from .providers import JOB_PROCESSES, Backend, LocalBackend, online_cpus

# the live market's requests, each naming its provider; a start also carries the contract's
# limits; "layout": where a provider's jobs' cgroups are (the executor reads their state)
EXCHANGE_REQUESTS: dict[str, dict[str, type | tuple[type, ...]]] = {
    op: {"provider": str, **fields} for op, fields in REQUESTS.items()}
EXCHANGE_REQUESTS["start"]["limits"] = dict
EXCHANGE_REQUESTS["layout"] = {"provider": str}
LIMIT_FIELDS = ("cpus", "memory", "cpuset")


def machine_memory() -> int:
    """This machine's memory in bytes (its pages times the page size)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _where(x):
    return None if x is None else [x[0], str(x[1])]


class ExchangeLauncherService(LauncherService):
    """The exchange's launcher: the live market's, over one jobs' folder per provider
    (``ROOT/NAME``) with per-contract limits within the ceilings fixed at its start (module
    docstring). ``limits.memory`` is the memory ceiling of one job, ``limits.processes`` every
    job's process limit."""

    requests = EXCHANGE_REQUESTS
    mapping = "SELECT 1 FROM ex_unix WHERE account = ?"

    def __init__(self, root: Path, owner: int, limits: JobLimits, db: Path):
        super().__init__(root, owner, limits, db)
        self.cpus = sorted(online_cpus() & os.sched_getaffinity(0))
        self.layouts: dict[str, Layout] = {}
        self.executors: dict[str, LocalExecutor] = {}

    def hello(self) -> dict:
        lay = self.layout  # detected for the providers' folder: cgroups are writable here
        if lay.track is None:
            return {"error": "the exchange's privileged launcher needs writable cgroups to contain contract jobs ("
                             + "; ".join(lay.notes) + ")"}
        lay.remove()  # only a probe: each provider's jobs have their own folders
        return {"cpus": self.cpus, "limits": self.ceilings()}

    def ceilings(self) -> dict:
        """The limits fixed at the start, as the executors' default :class:`JobLimits`."""
        return {"cpus": None, "memory": self.limits.memory, "processes": self.limits.processes, "cpuset": None}

    def provider_layout(self, name: str) -> Layout:
        try:
            check_name("provider", "provider", name)
        except ValueError as exc:
            raise Refused(str(exc)) from None
        if name not in self.layouts:
            self.layouts[name] = Layout.detect(market_cgroup_name(self.root / name), cpuset="auto")
        return self.layouts[name]

    def executor_of(self, fields: dict) -> LocalExecutor:
        name = fields["provider"]
        layout = self.provider_layout(name)
        if name not in self.executors:
            root = self.root / name
            if not root.is_dir():  # the exchange makes it (its own) before a provider's first job
                raise Refused(f"provider {name!r} has no jobs' folder yet")
            self.executors[name] = LocalExecutor(root, containment=replace(layout, notes=[]), limits=self.limits,
                                                 name=layout.name, owner=self.owner)
        return self.executors[name]

    def start_options(self, fields: dict, executor: LocalExecutor) -> dict:
        """The contract's limits (module docstring): ``limits`` with exactly the fields
        ``cpus``, ``memory``, ``cpuset`` (None: all the launcher's CPUs), each checked against
        the ceilings; the job is also pinned to its cpuset."""
        lim = fields["limits"]
        if set(lim) != set(LIMIT_FIELDS):
            raise Refused(f"start: limits must have exactly the fields {', '.join(LIMIT_FIELDS)}")
        cpuset = lim["cpuset"] if lim["cpuset"] is not None else list(self.cpus)
        if (not isinstance(cpuset, list) or not cpuset or len(set(cpuset)) != len(cpuset)
                or not all(isinstance(c, int) and not isinstance(c, bool) for c in cpuset)):
            raise Refused("start: limits.cpuset must be a list of distinct CPU numbers")
        outside = sorted(set(cpuset) - set(self.cpus))
        if outside:
            raise Refused(f"start: limits.cpuset names CPU(s) {outside[:8]} outside the exchange's CPUs {self.cpus}")
        cpus = lim["cpus"]
        if (isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or not math.isfinite(cpus)
                or not 0 < cpus <= len(cpuset)):
            raise Refused(f"start: limits.cpus must be above 0 and at most the cpuset's {len(cpuset)} CPU(s)")
        memory, ceiling = lim["memory"], self.limits.memory
        if isinstance(memory, bool) or not isinstance(memory, int) or not 0 < memory <= (ceiling or memory):
            raise Refused(f"start: limits.memory must be from 1 to {ceiling} bytes")
        confined = executor.layout.cpuset is not None
        return {"limits": JobLimits(cpus=float(cpus), memory=memory, processes=self.limits.processes,
                                    cpuset=tuple(sorted(cpuset)) if confined else None),
                "affinity": sorted(cpuset)}

    def handle(self, req) -> dict:
        op, f = self.check(req)
        if op == "layout":
            lay = self.provider_layout(f["provider"])
            return {"name": lay.name, "track": _where(lay.track), "cpu": _where(lay.cpu),
                    "memory": _where(lay.memory), "pids": _where(lay.pids), "cpuset": _where(lay.cpuset),
                    "notes": lay.notes, "limits": self.ceilings()}
        return super().handle(req)

    def cleanup(self, fields: dict) -> None:
        self.provider_layout(fields["provider"]).remove()


class _ProviderClient:
    """The launcher's client as one provider's executor uses it: every request names the
    provider; closing it leaves the launcher to the exchange (:func:`start_launcher`'s caller)."""

    def __init__(self, client: LauncherClient, provider: str):
        self.client, self.provider = client, provider
        self.hello = client.call("layout", provider=provider)

    def call(self, op: str, **fields) -> dict:
        return self.client.call(op, provider=self.provider, **fields)

    def close(self) -> None:
        pass


class ProviderLauncherExecutor(LauncherExecutor):
    """A local provider's executor in an exchange run as a service account: its jobs' folder
    ``root`` (``DATA/providers/NAME``, the exchange's own) and records are kept here; every
    privileged step goes to the launcher, each start with the contract's limits and cpuset."""

    def __init__(self, root: Path, client: LauncherClient, provider: str):
        pc = _ProviderClient(client, provider)
        # makes the provider's jobs' folder (the exchange's own) before any start reaches the launcher
        super().__init__(root, pc)  # type: ignore[arg-type]  # the launcher's client, for one provider
        cpuset = pc.hello["cpuset"]
        self.layout = replace(self.layout, cpuset=None if cpuset is None else (cpuset[0], Path(cpuset[1])))

    def start(self, key, command: str, env: dict | None = None, user=None, limits: JobLimits | None = None,
              affinity=None, weight: float | None = None, frozen: bool = False, record_exit: bool = True):
        if weight is not None or frozen or not record_exit:
            raise ValueError("CPU weights, frozen starts and unwrapped commands are not offered to contract jobs")
        if user is None:
            raise RuntimeError("the privileged launcher starts contract jobs as their users' accounts only")
        if key in self.launched:
            raise RuntimeError(f"job {key} was already started by this executor: a job never runs twice")
        lim = limits or JobLimits(cpus=None)
        cpuset = lim.cpuset or (tuple(affinity) if affinity else None)
        r = self.client.call("start", key=int(key), user=user.name, command=command,
                             env={str(k): str(v) for k, v in (env or {}).items()}, frozen=False, record_exit=True,
                             limits={"cpus": lim.cpus, "memory": lim.memory,
                                     "cpuset": sorted(cpuset) if cpuset else None})
        return Proc(key, r["pid"], r["ticks"], self.workdir(key), None,
                    cgroup=JobCgroup.from_paths(r["cgroups"], r["track"]))


def start_launcher(data: Path, account: str) -> LauncherClient:
    """For ``exchange run --service-user ACCOUNT``, started as root: check the data folder
    (``ACCOUNT``'s, not a link), spawn the privileged launcher for ``DATA/providers``, import what
    the exchange needs later, and drop to ``ACCOUNT`` for good; returns the launcher's client.
    ValueError / RuntimeError / OSError naming the problem."""
    if os.geteuid() != 0:
        raise ValueError("--service-user: start the exchange as root (it drops to the service account itself)")
    pw = service_account(account)
    data = Path(data)
    try:
        st = os.lstat(data)
    except FileNotFoundError:
        raise ValueError(f"no exchange at {data} (create one with: marketsched exchange init {data})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"the exchange's data folder {data} must be a folder, not a link or a file")
    if st.st_uid != pw.pw_uid:
        owner = _name_of(st.st_uid)
        raise ValueError(f"the exchange's data folder {data} belongs to {owner}, not to the service account "
                         f"{account!r}: hand it over (chown -R {account}: {data}) or set the exchange up as "
                         f"{account}")
    client = spawn(data / "providers", pw.pw_uid, JobLimits(cpus=None, memory=machine_memory(),
                                                            processes=JOB_PROCESSES),
                   data / "exchange.db", module="marketsched.exchange.launcher")
    try:
        _preload()
        drop_privileges(account)
    except BaseException:
        client.close()
        raise
    return client


def _name_of(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name!r} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _preload() -> None:
    """Import what the exchange needs later, before it drops to the service account, which may
    not be able to read the interpreter's files."""
    import concurrent.futures.thread  # noqa: F401 - the clearing's worker thread
    import importlib

    for name in ("marketsched.exchange.core", "marketsched.exchange.clearing", "marketsched.exchange.book",
                 "marketsched.exchange.distributed", "marketsched.exchange.replay",
                 "marketsched.platform.jobfiles", "marketsched.platform.cgroups"):
        importlib.import_module(name)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], ExchangeLauncherService))


def service_backends(data_dir: Path, launcher):
    """The backend factory of an exchange run as a service account (``exchange run
    --service-user``): each local provider's contracts under ``data_dir/providers/NAME``, started
    by the privileged launcher (``launcher``, its client); an agent provider's are run by its
    agent (:mod:`.agent_runs`); other kinds are refused (ValueError:
    the contract lapses, nobody pays)."""

    def make(provider: dict) -> Backend:
        if provider["kind"] == "agent":  # its agent runs its contracts (.agent_runs)
            from .agent_runs import AgentBackend

            return AgentBackend(provider["name"])
        if provider["kind"] != "local":
            raise ValueError(f"provider {provider['name']!r} is a {provider['kind']} provider, which an exchange "
                             "run as a service account (--service-user) does not run")
        root = Path(data_dir) / "providers" / provider["name"]
        return LocalBackend(root, executor=ProviderLauncherExecutor(root, launcher, provider["name"]))

    return make
