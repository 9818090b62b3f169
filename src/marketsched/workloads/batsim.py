"""Reader and writer of Batsim workload files (JSON: jobs with profiles).

Source: Batsim's documentation, "Workload" (Dutot, Mercier, Poquet and Richard (2016), the
Batsim simulator): a workload is a JSON object with ``nb_res`` (the platform's resources),
``jobs`` (each with ``id``, ``subtime``, ``res``, ``profile`` and optionally ``walltime``) and
``profiles`` (by name, each with a ``type``). A ``delay`` profile runs for ``delay`` seconds
whatever the platform, so its delay is the job's run time; the other profile types
(``parallel``, ``parallel_homogeneous``, ``msg_par``, ...) describe computation and
communication amounts whose duration depends on the simulated platform, which this toolkit
does not model: a job with one is refused, naming the job and its profile type.

Steps of :func:`read_workload`:

1. parse the JSON (an error names the file, line and column);
2. check the top level: ``nb_res`` a whole number >= 1, ``jobs`` a list, ``profiles`` an object;
3. per job (an error names the file, the job's position and its id): ``id`` is a number or
   text whose part after the last ``!`` (Batsim's ``workload!id`` form) is a whole number;
   ``subtime`` a number; ``res`` a whole number; ``profile`` names a ``delay`` profile;
   ``walltime`` (optional; absent or negative = unknown; JSON's non-standard ``Infinity`` and
   ``NaN`` are refused here and in a delay); ``user_id`` (optional, an extension
   this toolkit writes; absent = unknown);
4. return the columns as an :class:`~marketsched.workloads.swf.SwfLog` (SWF field names, -1
   where Batsim says nothing, ``MaxProcs`` = ``nb_res``), so the same cleaning
   (:func:`~marketsched.workloads.transforms.to_workload`), transforms and attribute models
   apply to a Batsim workload as to an SWF trace.

:func:`workload_json` writes a :class:`~marketsched.workloads.workload.Workload` back as a
Batsim workload (one ``delay`` profile per distinct run time), which :func:`read_workload`
reads to the same columns (a test checks the round trip from an SWF trace).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeGuard

import numpy as np

from .swf import FLOAT_FIELDS, SWF_FIELDS, SwfLog

SUFFIXES = (".json",)


class BatsimFormatError(ValueError):
    """A Batsim workload file this toolkit cannot read; the message names the file and the job."""


def is_batsim(path) -> bool:
    """Whether ``path`` names a Batsim workload (by its suffix: ``.json``)."""
    return Path(path).suffix.lower() in SUFFIXES


def _whole(x) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer()


def _job_number(raw, where: str) -> int:
    text = str(raw).rsplit("!", 1)[-1] if isinstance(raw, str) else raw
    try:
        value = float(text) if isinstance(text, str) else text
    except ValueError:
        value = None
    if not _whole(value):
        raise BatsimFormatError(f"{where}: id {raw!r} is not a whole number (or 'workload!number')")
    return int(value)


def read_workload(path) -> SwfLog:
    """The jobs of a Batsim workload file as SWF columns (see the module docstring)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BatsimFormatError(f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(doc, dict):
        raise BatsimFormatError(f"{path}: a Batsim workload is a JSON object with nb_res, jobs and profiles")
    nb_res = doc.get("nb_res")
    if not _whole(nb_res) or nb_res < 1:
        raise BatsimFormatError(f"{path}: nb_res must be a whole number >= 1, got {nb_res!r}")
    jobs, profiles = doc.get("jobs"), doc.get("profiles")
    if not isinstance(jobs, list):
        raise BatsimFormatError(f"{path}: 'jobs' must be a list of jobs, got {type(jobs).__name__}")
    if not isinstance(profiles, dict):
        raise BatsimFormatError(f"{path}: 'profiles' must be an object of named profiles, got {type(profiles).__name__}")
    n = len(jobs)
    cols = {f: np.full(n, -1.0 if f in FLOAT_FIELDS else -1, dtype=np.float64 if f in FLOAT_FIELDS else np.int64)
            for f in SWF_FIELDS}
    for i, job in enumerate(jobs):
        where = f"{path}: job {i + 1}"
        if not isinstance(job, dict):
            raise BatsimFormatError(f"{where}: expected an object, got {job!r}")
        for key in ("id", "subtime", "res", "profile"):
            if key not in job:
                raise BatsimFormatError(f"{where}: missing {key!r}")
        where = f"{where} (id {job['id']!r})"
        number = _job_number(job["id"], where)
        sub, res, wall = job["subtime"], job["res"], job.get("walltime", -1)
        if not isinstance(sub, (int, float)) or isinstance(sub, bool) or not np.isfinite(sub):
            raise BatsimFormatError(f"{where}: subtime {sub!r} is not a number")
        if not _whole(res):
            raise BatsimFormatError(f"{where}: res {res!r} is not a whole number")
        if wall is None or not isinstance(wall, (int, float)) or isinstance(wall, bool) or not np.isfinite(wall):
            raise BatsimFormatError(f"{where}: walltime {wall!r} is not a finite number")
        name = job["profile"]
        profile = profiles.get(name) if isinstance(name, str) else None
        if not isinstance(profile, dict):
            raise BatsimFormatError(f"{where}: profile {name!r} is not among the file's profiles")
        if profile.get("type") != "delay":
            raise BatsimFormatError(
                f"{where}: profile {name!r} has type {profile.get('type')!r}; only 'delay' profiles have a run time "
                "independent of the platform (the other types need a platform simulator such as Batsim itself)")
        delay = profile.get("delay")
        if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not 0 <= delay < np.inf:
            raise BatsimFormatError(f"{where}: profile {name!r} has delay {delay!r}, expected a finite number >= 0")
        user = job.get("user_id", -1)
        if not _whole(user):
            raise BatsimFormatError(f"{where}: user_id {user!r} is not a whole number")
        cols["job_number"][i] = number
        cols["submit_time"][i] = float(sub)
        cols["run_time"][i] = float(delay)
        cols["requested_procs"][i] = cols["allocated_procs"][i] = int(res)
        cols["requested_time"][i] = float(wall) if wall >= 0 else -1.0
        cols["user_id"][i] = int(user)
        cols["status"][i] = 1
    header = [("MaxProcs", str(int(nb_res))), ("Note", "read from a Batsim workload (delay profiles)")]
    return SwfLog(cols, dict(header), header, [], path)


def _number(x: float):
    """A whole float as an int (Batsim's own files write whole seconds that way)."""
    return int(x) if float(x).is_integer() else float(x)


def workload_json(w) -> dict:
    """A :class:`~marketsched.workloads.workload.Workload` as a Batsim workload (a JSON-ready dict):
    ``nb_res`` = its capacity; one job per row (``id`` the job id, ``subtime``, ``res`` the
    processors, ``walltime`` the run-time estimate where known, ``user_id`` where known, an
    extension Batsim ignores) and one ``delay`` profile per distinct run time."""
    if len(np.unique(w.job_id)) != len(w):
        raise ValueError("workload_json: job ids repeat (the serial copies of a split workload?); Batsim needs "
                         "unique ids: write the workload before the split")
    runtimes = sorted({float(r) for r in w.runtime.tolist()})
    names = {r: f"delay_{_number(r)}" for r in runtimes}
    jobs = []
    for jid, sub, rt, est, procs, user in zip(w.job_id.tolist(), w.submit_time.tolist(), w.runtime.tolist(),
                                              w.runtime_estimate.tolist(), w.procs.tolist(), w.user_id.tolist()):
        job = {"id": str(jid), "subtime": _number(sub), "res": int(procs), "profile": names[float(rt)]}
        if est == est:  # not NaN
            job["walltime"] = _number(est)
        if user >= 0:
            job["user_id"] = int(user)
        jobs.append(job)
    return {"nb_res": int(w.capacity), "jobs": jobs,
            "profiles": {names[r]: {"type": "delay", "delay": _number(r)} for r in runtimes}}


def write_workload(w, path) -> Path:
    """:func:`workload_json` of ``w`` written to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(workload_json(w), indent=1) + "\n")
    return path
