"""The agent's side of contracts run by their provider's agent (provider kind ``agent``; the
exchange's side and the trust rule: :mod:`.agent_runs`).

The agent runs each run the exchange publishes for it on its own executor: the live market's
:class:`~marketsched.platform.executor.LocalExecutor` through
:class:`.providers.LocalBackend`, as a local provider's contracts run on the exchange's
machine (a cgroup per job where the machine has them: the node's CPUs, the contracted share
of them, the contracted memory), as the agent's own Unix account (an agent run as root warns:
the users' jobs would run as root), in ``WORK/runs/job-ID``.

:meth:`RunKeeper.step`, once per poll of the agent's loop (:func:`.provider_agent.run_agent`):

1. When the exchange says runs wait (the ask's ``runs`` count), fetch them
   (``GET /api/provider/runs``) and start each new one, then report its start; a job that
   cannot start (e.g. its node's CPUs are offline) is reported ``not-started`` at once.
2. Report each job that ended by itself (``exit`` and its status).
3. Stop each job still running when its window ends (the seconds left that the exchange gave,
   on this machine's monotonic clock) and report it ``window``.

A report carries the agent's measured CPU seconds, the SHA-256 of the job's whole standard
output and its first :data:`.agent_runs.OUTPUT_LIMIT` bytes. A report the exchange refuses is
printed and dropped (the exchange settles the run by its deadline); one it does not answer (it
cannot be reached, or died before answering) is sent again at each step until it answers.

**A restarted agent re-adopts its runs** (:meth:`RunKeeper.recover`, at its first step). Before
it launches a run's job, the agent writes a record of the run in ``WORK/records/run-ID.json``:
its provider, the contract, the exchange's report deadline and the SHA-256 of the run's
command and environment, as the exchange published them. The job runs in its own session, so
it outlives an agent killed (kill -9) or stopped. Started again on the same folder, the agent
lists its runs (``GET /api/provider/runs``: only its own provider's, published, not reported,
before their deadline) and, for each run that has a record here equal to the listing's:

1. a job still running is watched again (the executor's state file: its process and start
   time) and stopped at its window's end (at once if the window has passed: it was running
   then, and is reported ``window``); a start not reported yet is reported;
   a run whose record says the agent was stopping its job at its window's end (the agent marks
   the record before the stop) is reported ``window``: an agent killed between its stop and its
   report is judged by that mark, never by the end its own stop gave the job;
2. a job that ended while the agent was down is reported ``exit`` with the status and output
   it left on disk (CPU seconds unknown), unless it ended at or after its window's end: then it
   was running at the window's end, where the agent, had it been up, would have stopped it, and
   it is reported ``window`` (the rule, and why it gives no party new power: :func:`_ended_in_window`);
3. a job whose go was never sent (the agent died during the launch) is started afresh.

The agent adopts nothing else: a run folder or state file with no record, or with a record of
another run (another provider's agent in the same folder, another exchange, a forged record
that does not match what the exchange published), is never reported; a run not started yet
whose folder holds such leftovers has them moved aside (``stale-job-ID-NS``) before its job
starts, so its output is its own. Decision: a run reported started whose record does not match
is not run again (its start is the exchange's record); it settles by the trust rule at its
deadline. The records of runs the exchange no longer lists (reported, or past their deadline
while the agent was down) are dropped, their jobs killed if still running. The jobs run as the
agent's own account, so a job can write into the agent's folder: the record binds a result to
the run the exchange published and to the process the agent launched, not against the jobs
themselves.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from marketsched.platform.client import Client, ClientError

from .orders import MAX_OUTPUT_BYTES as OUTPUT_LIMIT  # the bytes of a job's output an agent sends

RECORDS = "records"  # WORK/records/run-ID.json: the runs this agent started (RunKeeper.record)
WINDOW = "window"  # a record's mark: the agent stops the run's job at its window's end (RunKeeper.record_window)


class RunKeeper:
    """The runs of one agent, under ``data_dir/runs``."""

    def __init__(self, client: Client, data_dir: Path, log: Callable[[str], None] = print,
                 containment="auto", provider: str | None = None):
        from .providers import LocalBackend

        if os.geteuid() == 0:
            log("provider agent: running as root, so the users' contract jobs run as root on this machine: run the "
                "agent as an unprivileged account")
        self.client = client
        self.log = log
        self.backend = LocalBackend(Path(data_dir) / "runs", containment)
        self.records = Path(data_dir) / RECORDS
        self.records.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.provider = provider  # the token's provider (asked at the first step when None)
        self.recovered = False
        self.known: set[int] = set()  # runs started (or refused) here
        self.stop_at: dict[int, float] = {}  # running job -> monotonic time its window ends
        self.unsent: dict[int, dict] = {}  # end reports the exchange did not answer: sent again
        self.reported = 0

    def step(self, waiting: int) -> None:
        for cid, body in list(self.unsent.items()):
            self._send(cid, body)
        if not self.recovered:
            self.recover()
        elif waiting:
            for run in self.client.get("/api/provider/runs"):
                if run["contract"] not in self.known and not run["started"]:
                    self.start(run)
        for cid, code in self.backend.ended():
            if self.stop_at.pop(cid, None) is not None:
                self.report(cid, "exit", code)
        now = time.monotonic()
        for cid, at in list(self.stop_at.items()):
            if now >= at:
                del self.stop_at[cid]
                self.record_window(cid)  # the verdict's fact first: a crash in the stop keeps it
                self.report(cid, "window", None, stop=True)

    # ------------------------------------------------------------------ records and re-adoption
    def identity(self, run: dict) -> dict:
        """What the agent records of a run it starts: its provider, the contract, the report
        deadline and the digest of the command and environment the exchange published."""
        spec = json.dumps({"command": run["command"], "env": run["env"]}, sort_keys=True)
        return {"provider": self.provider, "contract": int(run["contract"]), "deadline": float(run["deadline"]),
                "spec": hashlib.sha256(spec.encode()).hexdigest()}

    def _record_path(self, cid: int) -> Path:
        return self.records / f"run-{cid}.json"

    def record(self, run: dict) -> None:
        """Write the run's record (atomic, mode 0600), before its job is launched."""
        self._write_record(int(run["contract"]), self.identity(run))

    def record_window(self, cid: int) -> None:
        """Mark run ``cid``'s record: its job was running at its window's end, and the agent
        stops it (before the stop, so that an agent killed between the stop and its report
        reports ``window`` at its restart, never the end its own stop gave the job)."""
        rec = self.recorded(cid)
        if rec is not None:
            self._write_record(cid, {**rec, WINDOW: True})

    def _write_record(self, cid: int, rec: dict) -> None:
        path = self._record_path(cid)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(rec, f)
        os.replace(tmp, path)

    def recorded(self, cid: int) -> dict | None:
        try:
            with open(self._record_path(cid)) as f:
                rec = json.load(f)
            return rec if isinstance(rec, dict) else None
        except (OSError, ValueError):
            return None

    def drop_record(self, cid: int) -> None:
        try:
            os.unlink(self._record_path(cid))
        except FileNotFoundError:
            pass

    def recover(self) -> None:
        """Re-adopt the runs this agent started before a restart (the module docstring), then
        start the runs waiting; once (a failure to reach the exchange is tried again at the next
        step)."""
        if self.provider is None:
            self.provider = str(self.client.get("/api/me")["name"])
        runs = self.client.get("/api/provider/runs")
        listed = {int(r["contract"]) for r in runs}
        for path in sorted(self.records.glob("run-*.json")):  # runs the exchange no longer lists
            cid = int(path.stem[4:]) if path.stem[4:].isdigit() else None
            if cid is not None and cid not in listed:
                if self.backend.executor.adopt(cid) is not None:
                    self.backend.executor.kill(cid)
                self.backend.executor.forget(cid)
                self.drop_record(cid)
        for run in runs:
            cid = int(run["contract"])
            rec = self.recorded(cid) or {}
            if {k: v for k, v in rec.items() if k != WINDOW} == self.identity(run):
                self.adopt(run, window=rec.get(WINDOW) is True)
            elif run["started"]:
                self.known.add(cid)
                self.log(f"contract {cid}: reported started, but this agent has no record of starting it here (or a "
                         "record of another run): not adopted; the exchange settles it at its deadline")
        self.recovered = True
        for run in runs:
            if int(run["contract"]) not in self.known and not run["started"]:
                self.start(run)

    def adopt(self, run: dict, window: bool = False) -> None:
        """A run of this agent's record, after a restart: watch its job again, report the end it
        had while the agent was down, or start it if it never had its go. ``window``: the record
        says the agent was stopping the job at its window's end: reported ``window`` (the job
        stopped first if still running), whatever end the stop gave it."""
        cid = int(run["contract"])
        got = self.backend.reattach(cid)
        if window:
            self.known.add(cid)
            self.log(f"contract {cid}: its job was stopped at its window's end before the agent's report")
            self.report(cid, "window", None, stop=True, measured=False)
            return
        if got is False:  # its go was never sent: nothing of it ran
            self.backend.executor.launched.discard(cid)
            self.drop_record(cid)
            return
        self.known.add(cid)
        if not run["started"]:
            self._started(cid)
        if got is True:
            self.stop_at[cid] = time.monotonic() + float(run["seconds_left"])
            self.log(f"contract {cid}: re-adopted its running job")
        elif _ended_in_window(self.backend.executor.exit_time(cid), time.time() + float(run["seconds_left"])):
            self.log(f"contract {cid}: its job ended while the agent was down")
            self.report(cid, "exit", got, measured=False)
        else:  # it was running at its window's end (the rule: _ended_in_window)
            self.log(f"contract {cid}: its job ended while the agent was down, after its window's end")
            self.report(cid, "window", None, measured=False)

    def _move_aside(self, cid: int) -> None:
        """Leftovers of a job folder this agent has no record of (moved, not read)."""
        root = self.backend.executor.root
        stamp = time.time_ns()
        for name in (f"job-{cid}", f"job-{cid}.proc"):
            if os.path.lexists(root / name):
                os.rename(root / name, root / f"stale-{name}-{stamp}")
                self.log(f"contract {cid}: moved {name} aside (not a run of this agent's record)")

    def start(self, run: dict) -> None:
        from .providers import Contracted

        cid = int(run["contract"])
        self.known.add(cid)
        if self.recorded(cid) != self.identity(run):
            self._move_aside(cid)
        self.record(run)
        cpus = run["cpus"]
        contracted = Contracted(float(run["share"]), int(run["mem"] or 0), tuple(cpus) if cpus else None)
        try:
            self.backend.start(cid, run["command"], run["env"], cpus, contracted=contracted)
        except OSError as exc:
            self.log(f"contract {cid}: could not start its job: {exc}")
            self._post(cid, {"end": "not-started", **_output(str(exc).encode())})
            self.drop_record(cid)
            return
        self.stop_at[cid] = time.monotonic() + float(run["seconds_left"])
        self._started(cid)
        self.log(f"contract {cid}: started")

    def _started(self, cid: int) -> None:
        try:
            self.client.post(f"/api/provider/runs/{cid}/started", {})
        except ClientError as exc:
            self.log(f"contract {cid}: start report refused: {exc.message}")

    def report(self, cid: int, end: str, code: int | None, stop: bool = False, measured: bool = True) -> None:
        """Report run ``cid``'s end (``stop``: stop its job first; not ``measured``: its CPU
        seconds are unknown, as for a job that ended while the agent was down)."""
        out = self.backend.executor.workdir(cid) / "stdout"
        used: float | None
        if stop:
            used = self.backend.stop(cid)
            used = used if measured else None
        else:
            used = (self.backend.usage(cid) or {}).get("cpu_seconds") if measured else None
            self.backend.fault(cid)  # forgets the job
        body = {"end": end, "cpu_seconds": used, **_file_output(out)}
        if code is not None:
            body["code"] = int(code)
        self._send(cid, body)

    def _send(self, cid: int, body: dict) -> None:
        """Send run ``cid``'s end report; its record goes once the exchange has answered (taken
        or refused). One the exchange did not answer (unreachable, or dead before its answer) is
        kept and sent again at the next step: taken then, or refused as a second report if the
        first was taken, never lost to an exchange's restart (the run would fail at its deadline)."""
        self.unsent.pop(cid, None)
        if self._post(cid, body):
            self.drop_record(cid)
        else:
            self.unsent[cid] = body

    def _post(self, cid: int, body: dict) -> bool:
        """Post run ``cid``'s end report; False if the exchange did not answer."""
        try:
            self.client.post(f"/api/provider/runs/{cid}/ended", body)
            self.reported += 1
            self.log(f"contract {cid}: reported {body['end']} {body.get('code', '')}".rstrip())
        except ClientError as exc:
            if exc.status == 0 or exc.status >= 500:
                self.log(f"contract {cid}: report not taken, sent again at the next step: {exc.message}")
                return False
            self.log(f"contract {cid}: report refused: {exc.message}")
        return True

    def close(self) -> None:
        self.backend.close()


def _ended_in_window(ended: float | None, window_end: float) -> bool:
    """Whether a job that ended while its agent was down is reported ``exit`` (True) or
    ``window`` (False), from ``ended``, when its wrapper recorded its exit status (the
    modification time of its ``exit_code`` file, :meth:`.JobFolders.exit_time`), and
    ``window_end``, both on this machine's wall clock.

    Rule: a job that ended at or after its window's end was running at the window's end; the
    agent, had it been up, would have stopped it there and reported ``window`` (a delivered
    result). Reporting its later end (a non-zero status, a signal) would make the provider pay
    a penalty only because its agent was down. So it is reported ``window``; a job that ended
    before its window's end is reported ``exit`` with its status, as an agent up would have.
    Decision: a job that recorded no exit status (killed with its cgroup, its wrapper too) has
    no end time here and is reported ``exit`` without a status, as before; the window's end is
    the listing's ``seconds_left`` at the restart added to this machine's wall clock then, so a
    step of that clock while the agent was down moves the boundary by the step.

    This gives no party new power: the report is the agent's word anyway (the exchange cannot
    observe the agent's machine, :mod:`.agent_runs`), and ``window`` makes the user pay, which
    no user's job would forge (a job that touches its ``exit_code`` file to a later time makes
    its own user pay); a provider could already report ``window`` for any run it wished."""
    return ended is None or ended < window_end


def _file_output(path: Path) -> dict:
    """:func:`_output` of a job's output file, read in chunks (a job may write more than fits
    in memory; only the first :data:`OUTPUT_LIMIT` bytes are kept). A missing file is empty."""
    digest, head, size = hashlib.sha256(), b"", 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                if len(head) < OUTPUT_LIMIT:
                    head += chunk[:OUTPUT_LIMIT - len(head)]
                size += len(chunk)
    except OSError:
        pass
    return {"digest": digest.hexdigest(), "output": base64.b64encode(head).decode(), "output_bytes": size}


def _output(data: bytes) -> dict:
    return {"digest": hashlib.sha256(data).hexdigest(), "output": base64.b64encode(data[:OUTPUT_LIMIT]).decode(),
            "output_bytes": len(data)}
