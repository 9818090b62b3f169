"""The offer agent's reserve price from its provider's load: a busier provider asks more, by
the rule in `agents.OfferAgent`; the same agent over the HTTP API (live: a real server)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from exchange_helpers import make_exchange
from marketsched.cli import main
from marketsched.exchange.access import LocalProviderAccess, ProviderApiAccess
from marketsched.exchange.agents import OfferAgent, agents_from_config
from marketsched.exchange.api import ExchangeServer, ExchangeService, issue_token
from marketsched.exchange.store import ExchangeStore
from marketsched.live.cli import Client


def _two_providers(path):
    """Providers a and b, one node n0 of 4 CPUs each, and their offer agents (cost 1, markup
    1.5, load weight 2, horizon 10, renew 3); both offer slots 1-10 at slot 0, idle."""
    ex, clock, machines = make_exchange(path, mechanism="critical-value", slot_seconds=10, period_seconds=10)
    agents = {}
    for p in ("a", "b"):
        ex.join(p)
        ex.add_node(p, "n0", 4, 100)
        agents[p] = OfferAgent(p, {"n0": 1.0}, markup=1.5, horizon=10, renew=3, load_weight=2.0)
    for agent in agents.values():
        agent.act(ex)
    return ex, clock, agents


def test_a_busier_provider_asks_more(tmp_path):
    ex, clock, agents = _two_providers(tmp_path / "x.db")
    assert [o[2:] for ag in agents.values() for o in ag.offers] == [(1.5, 0.0), (1.5, 0.0)]  # idle: cost x markup
    # a job of 4 CPUs over slots 2-10 fills one node: one provider gets it
    ex.submit_request("u", 9.0, 4, 0, 2, 10, "true")
    ex.clear()
    (c,) = ex.store.contracts()
    busy, idle = c["provider"], ({"a", "b"} - {c["provider"]}).pop()
    clock.advance(70)  # slot 7: both offers end within `renew` slots
    for agent in agents.values():
        agent.act(ex)
    # the busy node has sold slots 8-10 of the next 10 (8-17): load 0.3
    (_, _, r_busy, load_busy), (_, _, r_idle, load_idle) = agents[busy].offers[-1], agents[idle].offers[-1]
    assert load_busy == pytest.approx(0.3) and load_idle == 0.0
    assert r_busy == pytest.approx(1.5 * (1 + 2.0 * 0.3)) and r_idle == 1.5
    assert r_busy > r_idle
    new = {o["owner"]: o for o in ex.store.orders("offer", "open") if o["first_slot"] == 11}
    assert new[busy]["value"] == r_busy and new[idle]["value"] == r_idle
    assert (new[busy]["first_slot"], new[busy]["last_slot"]) == (11, 17)


def test_load_counts_every_contract_on_the_agents_nodes_and_caps_at_one(tmp_path):
    ex, clock, agents = _two_providers(tmp_path / "x.db")
    ex.add_node("a", "n1", 4, 100)  # a node the agent does not price is not in its load
    for first, last in ((1, 10), (1, 10)):
        ex.submit_request("u", 9.0, 2, 0, first + 1, last, "true")
    ex.clear()
    mine = [c for c in ex.store.contracts() if c["provider"] == "a"]
    a = LocalProviderAccess(ex, "a")
    sold = sum(c["cpu"] * (min(c["last_slot"], 10) - max(c["first_slot"], 1) + 1) for c in mine)
    assert agents["a"].load(a, [n for n in a.nodes() if n["name"] == "n0"], 0) == pytest.approx(sold / 40)
    assert OfferAgent("a", {"n0": 1}, horizon=1, renew=0).load(a, a.nodes()[:1], 4) <= 1.0
    with pytest.raises(ValueError, match="'load_weight' must be a number >= 0"):
        OfferAgent("a", {"n0": 1}, load_weight=-1)
    (agent,) = agents_from_config({"providers": [{"provider": "a", "costs": {"n0": 2}, "load_weight": 0.5}]}, 0)
    assert agent.load_weight == 0.5


@pytest.mark.live  # the live market's HTTP server
def test_the_same_offer_agent_over_the_api(tmp_path):
    ex, clock, agents = _two_providers(tmp_path / "x.db")
    ex.submit_request("u", 9.0, 4, 0, 2, 10, "true")
    ex.clear()
    busy = ex.store.contracts()[0]["provider"]
    clock.advance(70)
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        token = issue_token(ex.store, "provider", busy, 0.0)
        api, local = ProviderApiAccess(Client(srv.url, token)), LocalProviderAccess(ex, busy)
        assert api.slot() == local.slot() == 7
        assert [(n["id"], n["name"], n["cpu"]) for n in api.nodes()] == [(n["id"], n["name"], n["cpu"])
                                                                          for n in local.nodes()]
        assert [(o["id"], o["node_id"], o["last_slot"]) for o in api.open_offers()] == [
            (o["id"], o["node_id"], o["last_slot"]) for o in local.open_offers()]
        twin = OfferAgent(busy, {"n0": 1.0}, markup=1.5, horizon=10, renew=3, load_weight=2.0)
        (oid,) = twin.act(api)
        assert twin.offers[-1][2:] == (pytest.approx(1.5 * 1.6), pytest.approx(0.3))
        assert ex.store.order(oid)["value"] == twin.offers[-1][2] and ex.store.order(oid)["owner"] == busy
        # the command line runs it with a provider's token: nothing is due (its offer runs to slot 17)
        cfg = tmp_path / "me.json"
        cfg.write_text(json.dumps({"costs": {"n0": 1.0}, "markup": 1.5, "horizon": 10, "renew": 3,
                                   "load_weight": 2}))
        out = CliRunner().invoke(main, ["exchange", "bid", str(cfg), "--url", srv.url, "--token", token, "--for", "0",
                                          "--data", str(srv.identity_dir)])
        assert out.exit_code == 0 and f"0 offers for {busy!r}" in out.output, out.output
    finally:
        srv.shutdown()
        service.store.close()
        ex.store.close()
