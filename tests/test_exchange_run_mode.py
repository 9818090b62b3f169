"""Unmapped users are refused at submission when contracts run multi-user: ``exchange run``
records whose account contract jobs run as, and a request of a user with no Unix account is
then refused by the exchange (Python), the API's service and the command line, naming the fix
(docs/exchange.md, "Whose account a contract job runs as"). In-process, no job runs."""

from __future__ import annotations

import os
import signal

import pytest
from click.testing import CliRunner

from exchange_helpers import make_exchange
from marketsched.cli import main
from marketsched.exchange.api import ExchangeService
from marketsched.exchange.store import ExchangeStore
from marketsched.live.broker import MarketError

FIX = "marketsched exchange unix DATA carol ACCOUNT"


def refused(mode: str | None, user: str, mapped: set[str]) -> bool:
    """The rule, plainly: refused only in a multi-user run, for a user with no account."""
    return mode == "multi-user" and user not in mapped


def test_a_request_is_refused_exactly_when_its_job_could_never_run(tmp_path):
    ex, clock, _ = make_exchange(tmp_path / "x.db")
    ex.store.set_unix("alice", "nobody")
    slot = ex.slot()
    for mode in (None, "single-user", "multi-user", "single-user"):
        if mode is not None:
            ex.store.set_run_mode(mode)
        assert ex.store.run_mode() == mode
        for user in ("alice", "carol"):
            before = len(ex.store.orders())
            if refused(mode, user, {"alice"}):
                with pytest.raises(ValueError, match="request field 'user'.*no Unix account") as e:
                    ex.submit_request(user, 2.0, 1, 0, slot + 2, slot + 3, "true")
                assert FIX in str(e.value)
                assert len(ex.store.orders()) == before  # nothing written
            else:
                assert ex.submit_request(user, 2.0, 1, 0, slot + 2, slot + 3, "true") > 0
    with pytest.raises(ValueError, match="run mode must be one of single-user, multi-user"):
        ex.store.set_run_mode("root")
    ex.store.close()


def test_the_api_refuses_an_unmapped_users_request_naming_the_fix(tmp_path):
    ex, clock, _ = make_exchange(tmp_path / "x.db")
    ex.store.set_run_mode("multi-user")
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    body = {"value": 2, "cpu": 1, "first_slot": ex.slot() + 2, "last_slot": ex.slot() + 3, "command": "true"}
    try:
        with pytest.raises(MarketError, match="no Unix account") as e:
            service.submit_request(("user", "carol"), body)
        assert e.value.status == 400 and FIX in str(e.value)
        ex.store.set_unix("carol", "nobody")  # the operator's fix
        assert service.submit_request(("user", "carol"), body)["owner"] == "carol"
    finally:
        service.store.close()
        ex.store.close()


def mode_of(data) -> str | None:
    store = ExchangeStore(data)
    try:
        return store.run_mode()
    finally:
        store.close()


def test_exchange_run_records_its_mode_and_the_command_line_refuses(tmp_path, monkeypatch):
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # `exchange run` in-process: leave pytest's SIGTERM alone
    runner = CliRunner()
    data = tmp_path / "ex"

    def run(*args):
        return runner.invoke(main, ["exchange", *map(str, args)])

    assert run("init", data, "--slot-seconds", 1000).exit_code == 0
    request = ("request", data, "carol", "--value", 2, "--cpu", 1, "--first-slot", 3, "--last-slot", 4,
               "--command", "true")
    assert run(*request).exit_code == 0  # no run yet: the mode is unknown, the request is taken
    res = run("run", data, "--single-user", "--containment", "none", "--for", 0)
    assert res.exit_code == 0, res.output
    assert mode_of(data) == "single-user"
    assert run(*request).exit_code == 0
    if os.geteuid() != 0:
        pytest.skip("multi-user mode needs root")
    res = run("run", data, "--multi-user", "--containment", "none", "--for", 0)
    assert res.exit_code == 0, res.output
    assert "open requests of users with no Unix account, whose contracts will lapse: carol" in res.output
    assert mode_of(data) == "multi-user"
    res = run(*request)
    assert res.exit_code == 1 and "no Unix account" in res.output and FIX in res.output
    assert "Traceback" not in res.output
