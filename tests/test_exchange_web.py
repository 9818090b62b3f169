"""The exchange's market information page in headless Chromium: it shows the last clearing's
price, a line of prices over time per CPU class, the last clearings and the open book as the
API publishes them, and updates by itself after new clearings. A screenshot is saved (to
$MARKETSCHED_ARTIFACTS if set, else the test's tmp folder; its path is printed)."""

from __future__ import annotations

import os
from pathlib import Path

from browser_helpers import fresh, wait
from exchange_helpers import make_exchange, trade
from marketsched.exchange.api import ExchangeServer, ExchangeService
from marketsched.exchange.info import market_info, open_book
from marketsched.exchange.store import ExchangeStore


def test_the_page_shows_prices_over_time_and_the_open_book(tmp_path, browser):
    from selenium.webdriver.common.by import By

    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="k-pricing")
    trade(ex, clock, 12, seed=3)
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        browser.get(f"{srv.url}/")

        def text(el_id):
            return fresh(lambda: browser.find_element(By.ID, el_id).text)

        assert wait(browser, lambda d: text("period") == "12")
        info = market_info(ex.store)
        traded = [r for r in info if r["price"] is not None]
        assert len(traded) >= 8  # the scenario trades in most periods
        assert text("price") == f"{traded[-1]['price']:.3f}"
        assert "k-pricing, slots of 10 s, clearing every 30 s" in text("mech")
        first_row = text("periods").splitlines()[0].split()
        last = info[-1]
        assert first_row[:3] == ["12", f"{last['t']:.1f}", str(last["contracts"])]
        assert first_row[-1] == str(last["open_interest"])
        book = text("book").splitlines()
        assert book == [f"{b['side']} {b['cpu']} {b['orders']} {b['cpu_slots']}" for b in open_book(ex.store)]
        series = fresh(lambda: {el.get_attribute("data-series") for el in browser.find_elements(By.CSS_SELECTOR,
                                                                                                 "path.series")})
        classes = {str(c) for r in info for c in r["classes"]}
        assert series == {"all"} | classes and len(classes) >= 2
        for el in fresh(lambda: browser.find_elements(By.CSS_SELECTOR, "path.series")):
            points = fresh(lambda el=el: el.get_attribute("d")).count("L") + 1
            name = el.get_attribute("data-series")
            want = len(traded) if name == "all" else sum(1 for r in info if int(name) in r["classes"])
            assert points == want, name
        out = Path(os.environ.get("MARKETSCHED_ARTIFACTS") or tmp_path)
        out.mkdir(parents=True, exist_ok=True)
        shot = out / "exchange_page.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
        # two more clearings: the open page shows them without a reload
        refreshes = int(fresh(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes")))
        trade(ex, clock, 2, seed=4)
        assert wait(browser, lambda d: text("period") == "14")
        assert text("periods").splitlines()[0].split()[0] == "14"
        assert int(fresh(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes"))) > refreshes
        assert text("error") == ""
    finally:
        srv.shutdown()
        service.store.close()
        ex.store.close()
