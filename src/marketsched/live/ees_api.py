"""The HTTP routes of an EES or relaxed-EES market (:mod:`marketsched.live.ees_service`), part
of the live market's API (:mod:`marketsched.live.api` serves :data:`ROUTES` beside its own):

======  ===========================  ===========================================================
method  path                         what
======  ===========================  ===========================================================
POST    ``/api/ees/jobs``            ``{"value", "delay_cost" | "patience", "runtime", "command", "cpus"?}`` -> the job
GET     ``/api/ees``                 the queue with the head's discard threshold; own jobs (administrator: all)
GET     ``/api/ees/jobs/ID``         one job with its events and payments
DELETE  ``/api/ees/jobs/ID``         withdraw a job that has not ended
======  ===========================  ===========================================================
"""

from __future__ import annotations

from marketsched.live.attached import attached, collector
from marketsched.platform.http import INT, STR, Route
from marketsched.platform.validation import MarketError

ROUTES: list[Route] = []
route = collector(ROUTES)


def _ees(b):
    return attached(b, "ees", "`market serve --mechanism ees` or `--mechanism relaxed-ees`")


@route("POST", "/api/ees/jobs", "EES: submit a job (value, delay cost or patience, declared run time, command)",
       noun="an EES job", required=("value", "runtime", "command"),
       body={"value": {"type": "number", "description": "what running the job is worth to its owner"},
             "delay_cost": {"type": "number", "description": "cost per second of waiting (or give patience)"},
             "patience": {"type": "number", "description": "seconds the job would wait: delay cost = value / patience"},
             "runtime": {"type": "number", "description": "declared maximal run time, seconds (the job is stopped then)"},
             "command": {"oneOf": [STR, {"type": "array", "items": STR}]},
             "cpus": {**INT, "description": "CPUs (relaxed EES; under EES every job holds the whole machine)"}})
def ees_submit(b, who, q, body):
    for f in ("value", "runtime", "command"):
        if f not in body:
            raise MarketError(f"an EES job needs {f}; none given")
    return _ees(b).submit(who[0], body["value"], body["runtime"], body["command"], body.get("delay_cost"),
                          body.get("patience"), body.get("cpus"))


@route("GET", "/api/ees", "EES: the queue with the head's discard threshold, own jobs (administrator: all)")
def ees_status(b, who, q, body):
    return _ees(b).status(who[0], who[1])


@route("GET", "/api/ees/jobs/{job_id}", "EES: one job with its events and payments")
def ees_job(b, who, q, body, job_id):
    return _ees(b).job(who[0], who[1], job_id)


@route("DELETE", "/api/ees/jobs/{job_id}", "EES: withdraw a job that has not ended")
def ees_cancel(b, who, q, body, job_id):
    return _ees(b).cancel(who[0], who[1], job_id)

