"""The exchange's information page in Egg mode, in headless Chromium: each provider's reliability,
record, contracts by state, escrow held and compact price table as ``GET /api/egg/market``
publishes them, and a provider that left shown with its table withdrawn."""

from __future__ import annotations

import numpy as np

from browser_helpers import fresh, wait
from exchange_helpers import Machines
from marketsched.exchange import egg
from marketsched.exchange.api import ExchangeServer, ExchangeService
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.store import ExchangeStore
from marketsched.platform.clock import FakeClock

HOUR = 3600.0
EXAMPLE = [[9, 5, 4, 6], [19, 17, 13, 15], [24, 20, 15, 21]]  # Kang & Parkes 2007, example 2


def test_the_page_shows_each_egg_providers_table_record_contracts_and_escrow(tmp_path, browser):
    from selenium.webdriver.common.by import By

    store = ExchangeStore(tmp_path / "x.db")
    create_exchange(store, slot_seconds=HOUR, period_seconds=HOUR, mechanism="egg",
                    egg=egg.default_settings(patience_slots=3, horizon_slots=4, edges=[[0, 2, 4, 8]], runtime_dim=None))
    clock = FakeClock()
    ex = Exchange(store, clock, Machines(clock))
    ex.single_user = True
    for p in ("p1", "p2"):
        ex.join(p)
        ex.add_node(p, "n", 4, 100)
    ex.deposit("u1", 100)
    with store.transaction():
        egg.post_prices(ex.egg, "p1", EXAMPLE, clock())
        egg.post_prices(ex.egg, "p2", (np.array(EXAMPLE) + 1).tolist(), clock())
        egg.submit_bid(ex.egg, "u1", {"description": [2.5], "value": 19, "deadline": 3 * HOUR, "command": "true"},
                       clock())
    ex.leave("p2")
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        browser.get(f"{srv.url}/")

        def text(el_id):
            return fresh(lambda: browser.find_element(By.ID, el_id).text)

        assert wait(browser, lambda d: text("egg-providers").startswith("p1"))
        assert text("mech").endswith("an award at each bid (no clearing)")  # not "clearing every N s"
        lines = text("egg-providers").splitlines()
        assert lines[0] == ("p1 0.500 0 / 0 pending 1 13.00 9.000 x 1, 5.000 x 1, 4.000 x 1, 6.000 x 1 | "
                            "19.000 x 1, 17.000 x 1, 13.000 x 1, 15.000 x 1 | "
                            "24.000 x 1, 20.000 x 1, 15.000 x 1, 21.000 x 1")
        assert lines[1] == "p2 0.500 0 / 0 none 0.00 withdrawn (left)"
        assert text("egg-summary") == "contracts: pending/held 1; escrow held 13.00 (1)"
        assert text("egg-base") == "(from slot 0)"
        assert text("error") == ""
    finally:
        srv.shutdown()
        service.store.close()
        ex.store.close()
