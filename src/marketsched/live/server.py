"""The live market's HTTP server: the platform's server (:class:`marketsched.platform.server.Server`:
read deadlines, connection caps, per-party limits, peer credentials, TLS, identity) serving the
priority market's API (:func:`marketsched.live.api.make_app`)."""

from __future__ import annotations

from marketsched.live.api import make_app
from marketsched.platform.server import Server


class MarketServer(Server):
    """The broker's API on ``host:port`` and, with ``socket_path``, on a Unix socket (see
    :class:`~marketsched.platform.server.Server` for the arguments)."""

    def build_app(self):
        return make_app(self.broker, self.stats, max_in_flight=self.limits.max_in_flight,
                        per_party=self.limits.max_party_requests)
