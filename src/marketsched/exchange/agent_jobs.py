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
printed and dropped (the exchange settles the run by its deadline).
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from marketsched.platform.client import Client, ClientError

from .orders import MAX_OUTPUT_BYTES as OUTPUT_LIMIT  # the bytes of a job's output an agent sends


class RunKeeper:
    """The runs of one agent, under ``data_dir/runs``."""

    def __init__(self, client: Client, data_dir: Path, log: Callable[[str], None] = print,
                 containment="auto"):
        from .providers import LocalBackend

        if os.geteuid() == 0:
            log("provider agent: running as root, so the users' contract jobs run as root on this machine: run the "
                "agent as an unprivileged account")
        self.client = client
        self.log = log
        self.backend = LocalBackend(Path(data_dir) / "runs", containment)
        self.known: set[int] = set()  # runs started (or refused) here
        self.stop_at: dict[int, float] = {}  # running job -> monotonic time its window ends
        self.reported = 0

    def step(self, waiting: int) -> None:
        if waiting:
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
                self.report(cid, "window", None, stop=True)

    def start(self, run: dict) -> None:
        from .providers import Contracted

        cid = int(run["contract"])
        self.known.add(cid)
        cpus = run["cpus"]
        contracted = Contracted(float(run["share"]), int(run["mem"] or 0), tuple(cpus) if cpus else None)
        try:
            self.backend.start(cid, run["command"], run["env"], cpus, contracted=contracted)
        except OSError as exc:
            self.log(f"contract {cid}: could not start its job: {exc}")
            self._post(cid, {"end": "not-started", **_output(str(exc).encode())})
            return
        self.stop_at[cid] = time.monotonic() + float(run["seconds_left"])
        try:
            self.client.post(f"/api/provider/runs/{cid}/started", {})
        except ClientError as exc:
            self.log(f"contract {cid}: start report refused: {exc.message}")
        self.log(f"contract {cid}: started")

    def report(self, cid: int, end: str, code: int | None, stop: bool = False) -> None:
        out = self.backend.executor.workdir(cid) / "stdout"
        cpu: float | None
        if stop:
            cpu = self.backend.stop(cid)
        else:
            cpu = (self.backend.usage(cid) or {}).get("cpu_seconds")
            self.backend.fault(cid)  # forgets the job
        body = {"end": end, "cpu_seconds": cpu, **_file_output(out)}
        if code is not None:
            body["code"] = int(code)
        self._post(cid, body)

    def _post(self, cid: int, body: dict) -> None:
        try:
            self.client.post(f"/api/provider/runs/{cid}/ended", body)
            self.reported += 1
            self.log(f"contract {cid}: reported {body['end']} {body.get('code', '')}".rstrip())
        except ClientError as exc:
            self.log(f"contract {cid}: report refused: {exc.message}")

    def close(self) -> None:
        self.backend.close()


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
