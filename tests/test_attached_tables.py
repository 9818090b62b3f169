"""The job and event tables of the markets attached to the broker (DLGM and EES,
:class:`marketsched.live.attached.JobTables`): a database whose tables an earlier release made
(their schema as it was written then) opens, its rows read back and new ones written."""

from __future__ import annotations

import pytest

from marketsched.live.dlgm_service import DLGMTables
from marketsched.live.ees_service import EESTables
from marketsched.platform.ledger import Store

# the tables as the DLGM and EES markets created them before they shared one class
EARLIER = """
CREATE TABLE dlgm_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL REFERENCES users(name),
    weight REAL NOT NULL, runtime REAL NOT NULL, node INTEGER, command TEXT NOT NULL, submit_t REAL NOT NULL,
    state TEXT NOT NULL, note TEXT NOT NULL);
CREATE TABLE dlgm_events (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id BIGINT NOT NULL, t REAL NOT NULL,
    kind TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX dlgm_events_job ON dlgm_events(job_id);
CREATE TABLE ees_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL REFERENCES users(name),
    bid REAL NOT NULL, procs INTEGER NOT NULL, estimate REAL NOT NULL, command TEXT NOT NULL,
    submit_t REAL NOT NULL, state TEXT NOT NULL, first_start REAL, end_t REAL, attempts INTEGER NOT NULL,
    exit_code INTEGER, note TEXT NOT NULL);
CREATE INDEX ees_jobs_owner ON ees_jobs(owner);
CREATE TABLE ees_events (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id BIGINT NOT NULL, t REAL NOT NULL,
    kind TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX ees_events_job ON ees_events(job_id);
INSERT INTO dlgm_jobs (owner, weight, runtime, node, command, submit_t, state, note)
    VALUES ('alice', 1.5, 10, 1, 'true', 0, 'running', '');
INSERT INTO dlgm_events (job_id, t, kind, detail) VALUES (1, 0, 'node', '1');
INSERT INTO ees_jobs (owner, bid, procs, estimate, command, submit_t, state, attempts, note)
    VALUES ('alice', 2, 1, 5, 'true', 0, 'queued', 0, '')
"""


def test_tables_an_earlier_release_made_open_and_take_new_rows(tmp_path):
    store = Store(tmp_path)
    store.add_user("alice", "h", False, 0.0)
    with store.transaction():
        for stmt in EARLIER.split(";"):
            store._exec(stmt)
        store.set_meta("dlgm_schema_version", 1)
    dlgm, ees = DLGMTables(store), EESTables(store)
    assert dlgm.job(1) == {"id": 1, "owner": "alice", "weight": 1.5, "runtime": 10.0, "node": 1, "command": "true",
                           "submit_t": 0.0, "state": "running", "note": ""}
    assert [e["kind"] for e in dlgm.events(1)] == ["node"]
    assert ees.jobs("alice")[0]["bid"] == 2.0 and ees.jobs("bob") == []
    with store.transaction():
        j = dlgm.insert_job("alice", 3.0, 1, 2.0, "sleep 1", 1.0)
        dlgm.add_event(j, 1.0, "node", "0")
        k = ees.insert_job("alice", 4.0, 2, 6.0, "sleep 2", 1.0)
        ees.update_job(k, state="running", first_start=1.0)
    assert (j, k) == (2, 2)
    assert dlgm.job(2) == {"id": 2, "owner": "alice", "weight": 3.0, "runtime": 2.0, "node": 0, "command": "sleep 1",
                           "submit_t": 1.0, "state": "queued", "note": ""}
    assert {c: ees.job(2)[c] for c in ("procs", "estimate", "state", "first_start", "attempts")} == \
        {"procs": 2, "estimate": 6.0, "state": "running", "first_start": 1.0, "attempts": 0}
    assert [e["job_id"] for e in dlgm.events(kinds=("node",))] == [1, 2]


def test_a_route_of_a_market_this_broker_does_not_run_is_404_naming_how_to_start_it():
    from types import SimpleNamespace

    from marketsched.live import dlgm_api, ees_api
    from marketsched.platform.validation import MarketError

    plain = SimpleNamespace()  # a broker of the priority market: no attached market
    for lookup, name, start in ((ees_api._ees, "EES", "--mechanism relaxed-ees"), (dlgm_api._dlgm, "DLGM", "--mechanism pdlgm")):
        with pytest.raises(MarketError, match=f"does not run {name} .*{start}") as exc:
            lookup(plain)
        assert exc.value.status == 404
    svc = object()
    assert ees_api._ees(SimpleNamespace(ees=svc)) is svc and dlgm_api._dlgm(SimpleNamespace(dlgm=svc)) is svc
