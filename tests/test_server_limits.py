"""The shared server's admission rules without a server (no event loop, no process): the
per-party request gate, the connection registry's eviction order and per-party cap (compared
with a plain reference on random sequences), and the server identity a client checks before
sending a token (on loopback sockets of this process)."""

from __future__ import annotations

import json
import os
import random
import socket

import pytest

from marketsched.live.broker import MarketError
from marketsched.platform.http import Gate
from marketsched.platform.identity import (
    IDENTITY_NAME,
    NotTheServer,
    check_listener,
    pinned_context,
    read_identity,
    write_identity,
)
from marketsched.platform.server import ConnInfo, Registry


# ---------------------------------------------------------------------------- the request gate
def test_one_party_has_at_most_its_share_of_requests_in_progress():
    gate = Gate(max_in_flight=64, per_party=3)
    alice, bob = ("alice", False), ("bob", False)
    for _ in range(3):
        gate.enter(alice)
    with pytest.raises(MarketError, match="too many requests at once from alice") as e:
        gate.enter(alice)
    assert e.value.status == 429
    gate.enter(bob)  # another party is not held back
    gate.leave(alice)
    gate.enter(alice)
    for _ in range(3):
        gate.leave(alice)
    gate.leave(bob)
    assert gate.active == {}


# ---------------------------------------------------------------------------- the registry
class FakeConn:
    """What the registry sees of a connection: idle, waiting for a body, or busy."""

    def __init__(self, registry, n):
        self.n = n
        self.closed = False
        self.info = ConnInfo(lambda party: registry.claim(self, party))
        self.state = "idle"

    @property
    def state(self):
        return self._state

    @state.setter
    def state(self, state):  # "waiting": the API has marked the connection as waiting for its body
        self._state = state
        self.info.waiting_body = state == "waiting"

    def idle(self):
        return self.state == "idle"

    def close_now(self):
        self.closed = True

    def __repr__(self):
        return f"c{self.n}"


class Reference:
    """The rules, plainly: a list in order of last activity; a newcomer to a full server
    replaces the first idle one, else the first waiting for its body, else is refused; a party
    at its cap replaces its own first (in order of claiming) idle other connection, else is
    refused."""

    def __init__(self, most, per_party):
        self.most, self.per_party = most, per_party
        self.order: list = []  # connections, least recently active first
        self.claimed: list = []  # (party, connection) in order of claiming

    def admit(self, c):
        if len(self.order) >= self.most:
            victims = [x for x in self.order if x.state == "idle"] or [x for x in self.order if x.state == "waiting"]
            if not victims:
                return False
            self.drop(victims[0])
        self.order.append(c)
        return True

    def claim(self, c, party):
        if (party, c) in self.claimed:
            return True
        mine = [x for p, x in self.claimed if p == party]
        if len(mine) >= self.per_party:
            victims = [x for x in mine if x is not c and x.state == "idle"]
            if not victims:
                return False
            self.drop(victims[0])
        self.claimed = [(p, x) for p, x in self.claimed if x is not c] + [(party, c)]
        return True

    def drop(self, c):
        self.order = [x for x in self.order if x is not c]
        self.claimed = [(p, x) for p, x in self.claimed if x is not c]

    def touch(self, c):
        if c in self.order:
            self.order = [x for x in self.order if x is not c] + [c]


@pytest.mark.parametrize("seed", range(20))
def test_the_registry_evicts_as_the_reference_on_random_sequences(seed):
    rng = random.Random(seed)
    most, per_party = rng.randint(2, 6), rng.randint(1, 3)
    reg, ref = Registry(most, per_party), Reference(most, per_party)
    live: list[FakeConn] = []
    for n in range(300):
        op = rng.choice(["connect", "connect", "claim", "state", "done", "close"])
        if op == "connect":
            c = FakeConn(reg, n)
            c.state = rng.choice(["idle", "waiting", "busy"])  # ties: many share a state
            got, want = reg.admit(c), ref.admit(c)
            assert got == want
            if got:
                live.append(c)
        elif live and op == "claim":
            c, party = rng.choice(live), rng.choice("ab")
            assert c.info.claim(party) == ref.claim(c, party)
        elif live and op == "state":
            rng.choice(live).state = rng.choice(["waiting", "busy"])
        elif live and op == "done":  # an answer sent: idle, the most recently active
            c = rng.choice(live)
            c.state = "idle"
            reg.touch(c)
            ref.touch(c)
        elif live and op == "close":
            c = rng.choice(live)
            reg.discard(c)
            ref.drop(c)
            c.closed = True
        live = [c for c in live if not c.closed]
        assert list(reg.conns) == ref.order
        assert {p: list(m) for p, m in reg.parties.items()} == {
            p: [x for q, x in ref.claimed if q == p] for p in {q for q, _ in ref.claimed}}


# ---------------------------------------------------------------------------- server identity
@pytest.fixture
def listening():
    socks = []

    def listen(port=0):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1)
        socks.append(s)
        return s

    yield listen
    for s in socks:
        s.close()


def test_the_identity_names_the_servers_socket_and_no_other(tmp_path, listening):
    server = listening()
    port = server.getsockname()[1]
    write_identity(tmp_path, server)
    ident = read_identity(tmp_path)
    check_listener(ident, port, "here")  # the server itself
    with pytest.raises(NotTheServer, match="is port"):
        check_listener(ident, listening().getsockname()[1], "there")  # another port's listener
    server.close()
    with pytest.raises(ConnectionRefusedError):
        check_listener(ident, port, "here")  # nothing listens: the server is down
    squatter = listening(port)  # the port taken while the server is down; its identity file is stale
    with pytest.raises(NotTheServer, match="not the server whose identity is recorded"):
        check_listener(read_identity(tmp_path), port, "here")
    squatter.close()


def test_an_identity_another_account_could_write_is_not_believed(tmp_path, listening):
    write_identity(tmp_path, listening())
    path = tmp_path / IDENTITY_NAME
    os.chmod(path, 0o666)
    with pytest.raises(NotTheServer, match="not the server's own"):
        read_identity(tmp_path)
    os.chmod(path, 0o644)
    os.chmod(tmp_path, 0o777)
    with pytest.raises(NotTheServer, match="could be written by another account"):
        read_identity(tmp_path)
    os.chmod(tmp_path, 0o700)
    ident = json.loads(path.read_text())
    path.write_text(json.dumps({**ident, "uid": ident["uid"] + 1}))  # names an account that does not own it
    with pytest.raises(NotTheServer, match="not the server's own"):
        read_identity(tmp_path)
    path.unlink()
    with pytest.raises(NotTheServer, match="no server identity"):
        read_identity(tmp_path)


def test_a_pin_must_hold_a_certificate(tmp_path):
    bad = tmp_path / "key.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n")
    with pytest.raises(NotTheServer, match="holds no certificate"):
        pinned_context(bad)
    with pytest.raises(NotTheServer, match="cannot read"):
        pinned_context(tmp_path / "missing.pem")


def test_the_client_sends_no_token_without_an_identity_and_says_why(tmp_path, listening):
    from marketsched.live.cli import Client, ClientError

    squatter = listening()  # listens, answers nothing: the client must not even connect
    url = f"http://127.0.0.1:{squatter.getsockname()[1]}"
    with pytest.raises(ClientError, match="no server identity .*your token was not sent"):
        Client(url, "secret", check_server=True, server_dir=tmp_path).get("/api/me")
    with pytest.raises(ClientError, match="refusing to send your token over plain HTTP .* without checking"):
        Client(url, "secret", check_server=True).get("/api/me")
    squatter.setblocking(False)
    with pytest.raises(BlockingIOError):  # nobody connected to it
        squatter.accept()
    squatter.close()
    with pytest.raises(ClientError, match="cannot reach .*nothing listens"):  # down: the usual message
        Client(url, "secret", check_server=True, server_dir=tmp_path).get("/api/me")
