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
        # /api/market and /api/market/history are separate reads: a refresh between the two clearings
        # can show period 14 over a table that ends at 13; the next refresh shows both
        assert wait(browser, lambda d: text("periods").splitlines()[0].split()[0] == "14")
        assert int(fresh(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes"))) > refreshes
        assert text("error") == ""
    finally:
        srv.shutdown()
        service.store.close()
        ex.store.close()


def test_parties_submit_and_cancel_orders_from_the_page(tmp_path, browser):
    """A user pastes its token, sees its deposit, submits a request in the bid language, sees
    refused ones' errors naming the field (a bad value; one its deposit does not cover), and
    cancels its open request; a provider (after a reload, which asks
    for the token again) offers one of its nodes. Saves the screenshot of the page with orders."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from marketsched.exchange.api import issue_token

    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="k-pricing", deposits=True)
    for user, amount in [(f"u{i}", 1e6) for i in range(6)] + [("alice", 100)]:
        ex.deposit(user, amount)
    trade(ex, clock, 6, seed=3)
    ex.add_node("p1", "n1", 4, 32)
    alice, p1 = issue_token(ex.store, "user", "alice", 0.0), issue_token(ex.store, "provider", "p1", 0.0)
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    el = lambda el_id: browser.find_element(By.ID, el_id)  # noqa: E731
    text = lambda el_id: fresh(lambda: el(el_id).text)  # noqa: E731

    def fill(values: dict) -> None:
        for el_id, value in values.items():
            el(el_id).clear()
            el(el_id).send_keys(str(value))

    def login(token: str) -> None:
        browser.get(f"{srv.url}/")
        assert wait(browser, lambda d: text("slot") == str(ex.slot()))
        el("token").send_keys(token)
        el("use-token").click()

    def ready(party: str) -> bool:
        """The page's login() has filled the form for ``party`` (its last step: an event, not a time)."""
        return wait(browser, lambda d: browser.find_element(By.TAG_NAME, "body").get_attribute("data-party") == party)

    try:
        login(alice)
        assert wait(browser, lambda d: text("whoami") == "(user alice)")
        assert ready("user alice")
        assert wait(browser, lambda d: text("money") == "balance 100.000, committed 0.000, available 100.000 "
                                                      "(requests must be covered)")
        assert not el("token").get_attribute("value")  # the field is emptied at once
        assert el("offer-form").get_attribute("hidden") and not el("request-form").get_attribute("hidden")
        now = ex.slot()
        assert el("r-first").get_attribute("value") == str(now + 2)  # a window after the current slot
        fill({"r-value": "2.5", "r-cpu": 2, "r-mem": 4, "r-first": now + 3, "r-last": now + 5, "r-command": "sleep 1"})
        el("submit-request").click()
        assert wait(browser, lambda d: text("order-ok").startswith("request "))
        (mine,) = [o for o in ex.store.orders("request") if o["owner"] == "alice"]
        assert (mine["value"], mine["cpu"], mine["mem"], mine["first_slot"], mine["last_slot"], mine["command"],
                mine["state"]) == (2.5, 2, 4, now + 3, now + 5, "sleep 1", "open")
        assert text("order-ok") == f"request {mine['id']} open"
        assert wait(browser, lambda d: text("money").startswith("balance 100.000, committed 15.000, available 85.000"))
        assert wait(browser, lambda d: text("mine").splitlines()[0].split()[:6] == [
            str(mine["id"]), "request", "2.500", "2", f"{now + 3}-{now + 5}", "open"])
        # refused requests: the exchange's error names the field, nothing is stored
        fill({"r-value": "-1"})
        el("submit-request").click()
        assert wait(browser, lambda d: "request field 'value' must be a finite number" in text("order-error"))
        fill({"r-value": "15"})  # may cost 15 x 2 x 3 = 90 of the 85 available
        el("submit-request").click()
        assert wait(browser, lambda d: "request field 'value': the request may cost up to 90.000000" in text(
            "order-error"))
        assert len([o for o in ex.store.orders("request") if o["owner"] == "alice"]) == 1
        out = Path(os.environ.get("MARKETSCHED_ARTIFACTS") or tmp_path)
        out.mkdir(parents=True, exist_ok=True)
        shot = out / "exchange_orders.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
        # the refresh re-renders the table, so the button can go stale between finding and clicking it:
        # find and click again (a stale element is refused before the click is dispatched)
        fresh(lambda: browser.find_element(By.CSS_SELECTOR, f"button[data-cancel='{mine['id']}']").click())
        assert wait(browser, lambda d: ex.store.order(mine["id"])["state"] == "cancelled")
        assert wait(browser, lambda d: text("mine").splitlines()[0].split()[5] == "cancelled")
        assert wait(browser, lambda d: not browser.find_elements(By.CSS_SELECTOR, "button[data-cancel]"))

        # the provider: a reload forgets alice's token
        login(p1)
        assert wait(browser, lambda d: text("whoami") == "(provider p1)")
        assert ready("provider p1")  # after login()'s read of the nodes that fills the node list
        assert el("request-form").get_attribute("hidden") and not el("offer-form").get_attribute("hidden")
        node = Select(el("o-node"))
        assert [o.get_attribute("value") for o in node.options] == ["n0", "n1"]
        node.select_by_value("n1")
        now = ex.slot()
        fill({"o-reserve": "0.75", "o-first": now + 2, "o-last": now + 9})
        el("submit-offer").click()
        assert wait(browser, lambda d: text("order-ok").startswith("offer "))
        offer = ex.store.orders("offer")[-1]
        assert (offer["owner"], offer["node_id"], offer["value"], offer["first_slot"], offer["last_slot"]) == (
            "p1", ex.store.node_id("p1", "n1"), 0.75, now + 2, now + 9)
        # an offer of n0, whose open offer overlaps: refused, the field named
        node.select_by_value("n0")
        el("submit-offer").click()
        assert wait(browser, lambda d: "offer fields 'first_slot'/'last_slot': node 'n0'" in text("order-error"))
        assert ex.store.orders("offer")[-1]["id"] == offer["id"]
        assert text("error") == ""
    finally:
        srv.shutdown()
        service.store.close()
        ex.store.close()
