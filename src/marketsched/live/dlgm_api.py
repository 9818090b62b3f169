"""The HTTP routes of a DLGM or P-DLGM market (:mod:`marketsched.live.dlgm_service`), part of
the live market's API (:mod:`marketsched.live.api` serves :data:`ROUTES` beside its own):

======  ===========================  ===========================================================
method  path                         what
======  ===========================  ===========================================================
POST    ``/api/dlgm/jobs``           ``{"weight", "runtime", "command", "node"?}`` -> the job, its node and transfers
GET     ``/api/dlgm/quote``          ``?weight=W&runtime=D``: every node's completion, payment, utility
GET     ``/api/dlgm``                each node's running job and queue; own jobs (administrator: all)
GET     ``/api/dlgm/jobs/ID``        one job with its events
======  ===========================  ===========================================================
"""

from __future__ import annotations

from marketsched.live.attached import attached, collector
from marketsched.platform.http import INT, NUM, STR, Route
from marketsched.platform.validation import MarketError, show

ROUTES: list[Route] = []
route = collector(ROUTES)


def _dlgm(b):
    return attached(b, "dlgm", "`market serve --mechanism dlgm` or `--mechanism pdlgm`")


def _query_number(q, name: str, what: str) -> float:
    if name not in q:
        raise MarketError(f"give {name} ({what}) in the query: ?weight=W&runtime=D")
    try:
        return float(q[name])
    except ValueError:
        raise MarketError(f"{name} must be a number ({what}), got {show(q[name])}") from None


@route("POST", "/api/dlgm/jobs", "DLGM: submit a job (weight, reported run time, command, optional node)",
       noun="a DLGM job", required=("weight", "runtime", "command"),
       body={"weight": {"type": "number", "description": "bid per second of waiting (the job's weight)"},
             "runtime": {"type": "number", "description": "reported run time, seconds (the job is stopped then)"},
             "command": {"oneOf": [STR, {"type": "array", "items": STR}]},
             "node": {**INT, "description": "the node to join (default: the best tentative utility)"}})
def dlgm_submit(b, who, q, body):
    for f in ("weight", "runtime", "command"):
        if f not in body:
            raise MarketError(f"a DLGM job needs {f}; none given")
    return _dlgm(b).submit(who[0], body["weight"], body["runtime"], body["command"], body.get("node"))


@route("GET", "/api/dlgm/quote", "DLGM: every node's tentative completion time, payment and utility",
       query={"weight": (NUM, "bid per second of waiting"), "runtime": (NUM, "reported run time, seconds")})
def dlgm_quote(b, who, q, body):
    return _dlgm(b).quote(_query_number(q, "weight", "bid per second of waiting"),
                          _query_number(q, "runtime", "reported run time, seconds"))


@route("GET", "/api/dlgm", "DLGM: each node's running job and queue, own jobs (administrator: all)")
def dlgm_status(b, who, q, body):
    return _dlgm(b).status(who[0], who[1])


@route("GET", "/api/dlgm/jobs/{job_id}", "DLGM: one job with its events")
def dlgm_job(b, who, q, body, job_id):
    return _dlgm(b).job(who[0], who[1], job_id)
