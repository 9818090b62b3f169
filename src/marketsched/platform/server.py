"""The HTTP server every live market runs on: a market's API (a FastAPI application, e.g.
:mod:`marketsched.live.api` or :mod:`marketsched.exchange.api`, built with
:mod:`marketsched.platform.http`) served by uvicorn's HTTP/1.1 protocol (h11) on a TCP address
and on a Unix socket, in one thread of its own. A market subclasses :class:`Server` and names
its application in :meth:`Server.build_app`.

What it adds to uvicorn, which on its own has no limit on how long a client may take to send a
request nor on how many connections it holds (each costs a file descriptor, and a broker out
of descriptors cannot start a job):

* **Read deadlines.** A connection must deliver a request's headers within ``header_timeout``
  seconds of being accepted (or of the previous response), and its body within
  ``body_timeout`` seconds of the headers; else it is closed. Idle keep-alive connections are
  closed after ``keep_alive`` seconds, TLS handshakes after ``header_timeout``, and a response
  the client does not read after ``send_timeout``.
* **A connection cap that does not lock clients out.** At most ``max_connections`` (further
  capped by the process's open-file limit, keeping descriptors for the database and the jobs).
  When full, a new connection takes the place of the connection idle the longest (no request
  in progress: an idle or slow client), as nginx reuses idle keep-alive connections; failing
  that, of the connection waiting the longest for a request's body (which holds no request
  slot); only when every connection is serving a request is the newcomer closed. So a flood of
  idle sockets or slow bodies cannot keep a health check or a user out.
* **Per-party limits.** Once a request names its caller (the API authenticates it from the
  headers, before reading the body), the connection counts as that party's: a party holds at
  most ``max_party_connections`` (one more takes the place of the party's own idle one, else
  429) and has at most ``max_party_requests`` requests in progress, waiting for their bodies
  included (:class:`marketsched.platform.http.Gate`; 429 beyond). A body is read before its request
  takes one of the ``max_in_flight`` request slots, so slow bodies never hold them.
* **Identity.** The server writes ``server.id`` (and ``server-cert.pem`` with TLS) to its data
  folder, for a client to check who listens before sending a token
  (:mod:`marketsched.platform.identity`).
* **No desync.** h11 frames every body by its ``Content-Length`` or chunked encoding and
  refuses anything else (a negative or malformed length, two different lengths) with 400 and a
  closed connection; a response sent before its request's body was read in full (an error, a
  413) ends the connection, so the rest of that body is never parsed, least of all as a
  request: the server sends the response and half-closes, then discards what the client still
  sends until it closes or ``LINGER_SECONDS`` pass (a lingering close, as nginx does; closing
  at once would let the kernel reset the connection and lose the response). A lingering
  connection stays within the connection cap; a body cut at its deadline closes at once.
* **Errors as JSON**: uvicorn's plain-text 400 becomes ``{"error": "invalid HTTP request: ..."}``.
* **Peer credentials**: on the Unix socket, the kernel's ``SO_PEERCRED`` (pid, uid, gid of the
  connecting process) goes into the request's ASGI state as ``marketsched.peer``, from which
  the API identifies the caller (no token); TCP requests carry none.
* **TLS** on the TCP address (``tls_cert``, ``tls_key``; TLS 1.2 at least). Plain HTTP is
  refused on an address that is not loopback unless ``insecure_http`` is given: a token sent
  in clear over a network is anyone's.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import resource
import socket
import ssl
import stat
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from marketsched.platform.files import short_socket_path
from marketsched.platform.identity import remove_identity, write_identity

log = logging.getLogger("marketsched.platform.server")

CONN_STATE = "marketsched.conn"  # ASGI state key: the connection's ConnInfo
PEER_STATE = "marketsched.peer"  # ASGI state key: (uid, gid, pid) of a Unix-socket peer
LINGER_SECONDS = 5.0  # how long a connection answered early discards the rest of its body
FD_RESERVE = 128  # descriptors kept for the database, pipes, pidfds and the jobs' own files
ACCEPT_BATCH = 64  # connections asyncio accepts in one go (the kernel's queue is Limits.backlog)


@dataclass
class Limits:
    """The server's limits (seconds, counts). ``max_connections`` is further capped by the
    open-file limit (:func:`fd_budget`)."""

    max_connections: int = 1000
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive: int = 5  # whole seconds (uvicorn's setting)
    send_timeout: float = 30.0
    max_in_flight: int = 64  # requests handled at once, their bodies read; the others wait
    max_party_requests: int = 16  # requests one party has in progress at once (reading a body included)
    max_party_connections: int = 64  # connections one party holds once its requests name it
    backlog: int = 1024

    def check(self) -> None:
        for name in ("max_connections", "max_in_flight", "max_party_requests", "max_party_connections", "backlog"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1_000_000:
                raise ValueError(f"{name} must be a whole number from 1 to 1000000, got {v!r}")
        for name in ("header_timeout", "body_timeout", "keep_alive", "send_timeout"):
            v = getattr(self, name)
            if not 0 < v <= 3600:
                raise ValueError(f"{name} must be more than 0 and at most 3600 seconds, got {v!r}")


def fd_budget(slots: int) -> int:
    """Connections the open-file limit leaves room for, after ``FD_RESERVE`` descriptors, 8
    per job slot, and two accept batches (connections just accepted, and connections closed
    to make way for them, whose descriptors the event loop releases a moment later): a full
    descriptor table would make the event loop stop accepting for a second at a time."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1_000_000
    return max(8, soft - FD_RESERVE - 8 * slots - 2 * ACCEPT_BATCH)


def raise_fd_limit(to: int = 65536) -> int:
    """Raise this process's soft open-file limit towards ``to`` (never above the hard limit);
    returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = to if hard == resource.RLIM_INFINITY else min(to, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    return soft


def is_loopback(host: str) -> bool:
    """True if every address ``host`` resolves to is a loopback address."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    addrs = {ipaddress.ip_address(str(i[4][0]).split("%")[0]) for i in infos}
    return bool(addrs) and all(a.is_loopback for a in addrs)


def check_plain_http(host: str, tls: bool, insecure_http: bool) -> None:
    """Refuse plain HTTP on an address beyond loopback (ValueError) unless forced."""
    if not tls and not insecure_http and not is_loopback(host):
        raise ValueError(f"refusing plain HTTP on {host}, which is not a loopback address: tokens would cross the "
                         "network in clear. Give --tls-cert and --tls-key, or --insecure-http to force it")


class ConnInfo:
    """What the server knows of a connection, for the API (``scope["state"][CONN_STATE]``):
    when it last received bytes, the party its requests name (once one is authenticated), and
    whether a request of it is waiting for its body (before taking a request slot)."""

    __slots__ = ("received_at", "party", "waiting_body", "_claim")

    def __init__(self, claim=None):
        self.received_at = 0.0  # loop time of the last bytes received
        self.party: object = None
        self.waiting_body = False
        self._claim = claim

    def claim(self, party) -> bool:
        """This connection is ``party``'s (its request is authenticated as it); False when the
        party already holds as many connections as it may, none of them idle."""
        if self.party == party or self._claim is None:
            self.party = party
            return True
        return self._claim(party)


class _Conn(h11.Connection):
    """h11's connection, remembering the protocol error it raised (for the 400 message)."""

    last_error: h11.RemoteProtocolError | None = None

    def next_event(self):
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.last_error = exc
            raise


class _LingeringTransport:
    """A connection's transport whose ``close`` lingers after a response that was sent before
    the request's body was read in full (an error, a 413): it sends the response and
    half-closes, then discards what the client still sends until the client closes or
    :data:`LINGER_SECONDS` pass (then the real close). Closing at once would make the kernel
    answer the unread bytes with a reset, which can destroy the response before the client
    reads it. Only a connection whose response is complete lingers: one cut at a deadline, or
    evicted to make room, closes at once; a lingering connection stays in the registry (it is
    idle, so the first to be evicted) and so within the connection cap. TLS has no half-close:
    there the connection closes at once."""

    def __init__(self, inner, proto: MarketProtocol):
        self._inner = inner
        self._proto = proto

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def is_closing(self) -> bool:
        return self._proto._lingering or self._inner.is_closing()

    def write(self, data) -> None:
        if not self._proto._lingering:  # lingering: our side of the stream has ended
            self._inner.write(data)

    def close(self) -> None:
        proto = self._proto
        if proto._lingering:
            return  # already closing: the client's end of stream or the linger timer closes it
        answered = proto.cycle is not None and proto.cycle.response_complete
        if (answered and not self._inner.is_closing() and proto.conn.their_state is h11.SEND_BODY
                and self._inner.can_write_eof()):
            try:
                self._inner.write_eof()
            except OSError:  # the client is gone already
                self._inner.close()
                return
            proto._lingering = True
            self._inner.resume_reading()
            proto._linger_timer = proto.loop.call_later(LINGER_SECONDS, self._inner.close)
            return
        self._inner.close()

    def close_now(self) -> None:
        """Close without lingering."""
        self._inner.close()


class Registry:
    """The server's open connections, least recently active first, and each party's.

    When full, a newcomer takes the place of the connection idle the longest; failing that,
    of the one waiting the longest for a request's body (it holds no request slot: the body is
    read before one is taken; its request ends unanswered). A party (the caller a request
    authenticates as) holds at most ``per_party`` connections: one more takes the place of
    that party's idle one, else is refused (429, by the API)."""

    def __init__(self, max_connections: int, per_party: int = 64):
        self.max = max_connections
        self.per_party = per_party
        self.conns: OrderedDict[MarketProtocol, None] = OrderedDict()
        self.parties: dict[object, dict[MarketProtocol, None]] = {}
        self.evicted = 0
        self.refused = 0

    def admit(self, proto: MarketProtocol) -> bool:
        if len(self.conns) >= self.max:
            victim = next((c for c in self.conns if c.idle()), None)
            if victim is None:
                victim = next((c for c in self.conns if c.info.waiting_body), None)
            if victim is None:
                self.refused += 1
                return False
            self._evict(victim)
        self.conns[proto] = None
        return True

    def _evict(self, victim: MarketProtocol) -> None:
        self.discard(victim)
        victim.close_now()
        self.evicted += 1

    def claim(self, proto: MarketProtocol, party) -> bool:
        """Count ``proto`` as ``party``'s, making way by closing that party's oldest idle
        connection if it holds ``per_party`` already; False if none of them is idle."""
        mine = self.parties.get(party, {})
        if proto not in mine and len(mine) >= self.per_party:
            victim = next((c for c in mine if c.idle()), None)
            if victim is None:
                return False
            self._evict(victim)
        self._release(proto)
        proto.info.party = party
        self.parties.setdefault(party, {})[proto] = None  # after the eviction, which may drop the party's entry
        return True

    def _release(self, proto: MarketProtocol) -> None:
        mine = self.parties.get(proto.info.party)
        if mine is not None:
            mine.pop(proto, None)
            if not mine:
                del self.parties[proto.info.party]

    def touch(self, proto) -> None:
        if proto in self.conns:
            self.conns.move_to_end(proto)

    def discard(self, proto) -> None:
        self.conns.pop(proto, None)
        self._release(proto)


class MarketProtocol(H11Protocol):
    """uvicorn's h11 protocol with read deadlines, the connection cap, peer credentials and
    JSON errors (module docstring). ``limits`` and ``registry`` are set per server."""

    limits: Limits
    registry: Registry

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conn = _Conn(h11.SERVER, self.config.h11_max_incomplete_event_size
                          or h11._connection.DEFAULT_MAX_INCOMPLETE_EVENT_SIZE)
        self.info = ConnInfo(lambda party: self.registry.claim(self, party))
        self._phase: str | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._send_deadline: asyncio.TimerHandle | None = None
        self._lingering = False  # answered early: discarding the rest of the body before closing
        self._linger_timer: asyncio.TimerHandle | None = None

    def close_now(self) -> None:
        """Close the connection without lingering (an eviction)."""
        transport: object = self.transport
        if isinstance(transport, _LingeringTransport):
            transport.close_now()
        else:
            self.transport.close()

    def idle(self) -> bool:
        """No request in progress (waiting for one, or reading its headers)."""
        return self.cycle is None or self.cycle.response_complete

    # ------------------------------------------------------------------ connection
    def connection_made(self, transport) -> None:
        super().connection_made(cast(asyncio.Transport, _LingeringTransport(transport, self)))
        self.info.received_at = self.loop.time()
        self.app_state = {**self.app_state, CONN_STATE: self.info}
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                struct.calcsize("3i")))
            self.app_state[PEER_STATE] = (uid, gid, pid)
        if not self.registry.admit(self):
            log.warning("connection refused: all %d connections are serving requests", self.registry.max)
            transport.abort()
            return
        self._watch()

    def connection_lost(self, exc) -> None:
        self.registry.discard(self)
        for handle in (self._deadline, self._send_deadline, self._linger_timer):
            if handle is not None:
                handle.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.info.received_at = self.loop.time()
        if self._lingering:
            return  # the rest of a body answered before it was read: discarded, never parsed
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        if self.conn.their_state is h11.SEND_BODY:
            # answered before the body was read in full: never read the rest as a request
            self.transport.close()  # a lingering close (_LingeringTransport)
        super().on_response_complete()
        if not self.transport.is_closing():
            self.registry.touch(self)
            self._watch()

    # ------------------------------------------------------------------ deadlines
    def _watch(self) -> None:
        """Arm the read deadline of the request phase h11 is in: headers (IDLE), body
        (SEND_BODY); none once the request is read (the application's turn)."""
        state = self.conn.their_state
        phase = "header" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase == self._phase:
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None:
            timeout = self.limits.header_timeout if phase == "header" else self.limits.body_timeout
            self._deadline = self.loop.call_later(timeout, self._expire, phase)

    def _expire(self, phase: str) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.info("closing a connection that took too long to send a request's %s", phase)
            self.transport.close()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_deadline is None:
            self._send_deadline = self.loop.call_later(self.limits.send_timeout, self.transport.abort)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_deadline is not None:
            self._send_deadline.cancel()
            self._send_deadline = None

    # ------------------------------------------------------------------ errors
    def send_400_response(self, msg: str) -> None:
        exc = self.conn.last_error if isinstance(self.conn, _Conn) else None
        status = exc.error_status_hint if exc is not None and 400 <= exc.error_status_hint < 500 else 400
        body = json.dumps({"error": f"invalid HTTP request: {exc}" if exc is not None else msg}).encode()
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the application's answer, if any, goes nowhere
            self.cycle.message_event.set()
        try:
            for event in (h11.Response(status_code=status, reason=b"Bad Request",
                                       headers=[(b"content-type", b"application/json"), (b"connection", b"close"),
                                                (b"content-length", str(len(body)).encode())]),
                          h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:  # a response had already begun: nothing more to say
            pass
        self.transport.close()


class _Uvicorn(uvicorn.Server):
    """uvicorn's server on listening sockets made beforehand, each with its own TLS context
    (the Unix socket never has one) and a TLS handshake deadline."""

    def __init__(self, config: uvicorn.Config, protocol: type[MarketProtocol],
                 listeners: list[tuple[socket.socket, ssl.SSLContext | None]], handshake_timeout: float):
        super().__init__(config)
        self.protocol = protocol
        self.listeners = listeners
        self.handshake_timeout = handshake_timeout

    async def startup(self, sockets=None) -> None:
        config = self.config

        def create_protocol(_loop=None) -> MarketProtocol:
            return self.protocol(config=config, server_state=self.server_state, app_state={}, _loop=_loop)

        loop = asyncio.get_running_loop()
        self.servers = []
        for sock, ctx in self.listeners:
            # asyncio accepts up to `backlog` connections per wake-up: a small batch, so that the
            # descriptors of connections closed to make way are released between batches ...
            if ctx is None:
                server = await loop.create_server(create_protocol, sock=sock, backlog=ACCEPT_BATCH)
            else:
                server = await loop.create_server(create_protocol, sock=sock, backlog=ACCEPT_BATCH, ssl=ctx,
                                                  ssl_handshake_timeout=self.handshake_timeout)
            self.servers.append(server)
            sock.listen(config.backlog)  # ... and the kernel's queue of connections waiting stays long
        self.started = True


class Server:
    """A market's API on ``host:port`` (TLS with ``tls_cert`` and ``tls_key``) and, with
    ``socket_path``, on a Unix socket (mode 0666; callers identified by peer credentials).
    ``broker`` is the market's service object, handed to :meth:`build_app` (a market's
    subclass names its application there). Its identity (``server.id``, and
    ``server-cert.pem`` with TLS) goes to ``identity_dir`` (default: the service's ``data``
    folder) for clients to check (:mod:`marketsched.platform.identity`). Sockets are bound at
    construction (``url`` is known at once; OSError if taken), served by
    :meth:`serve_in_thread` until :meth:`shutdown`."""

    def __init__(self, broker, host: str = "127.0.0.1", port: int = 8765, *, socket_path=None, tls_cert=None,
                 tls_key=None, insecure_http: bool = False, limits: Limits | None = None, identity_dir=None):
        self.broker = broker
        self.limits = limits or Limits()
        self.limits.check()
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
        check_plain_http(host, tls_cert is not None, insecure_http)
        self.tls = tls_cert is not None
        ctx = None
        if self.tls:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(str(tls_cert), str(tls_key))
        slots = getattr(getattr(broker, "config", None), "slots", 1)
        self.registry = Registry(min(self.limits.max_connections, fd_budget(slots)), self.limits.max_party_connections)
        self._sockets: list[socket.socket] = []
        self._identity: dict | None = None
        self._unix_bound = False
        self.socket_path = Path(socket_path) if socket_path is not None else None
        try:
            tcp = self._bind_tcp(host, port)
            listeners = [(tcp, ctx)]
            if self.socket_path is not None:
                listeners.append((self._bind_unix(self.socket_path), None))
        except BaseException:
            self.server_close()
            raise
        self.host, self.port = host, tcp.getsockname()[1]
        # who listens here, for clients to check before they send a token (marketsched.platform.identity)
        folder = identity_dir if identity_dir is not None else getattr(broker, "data", None)
        self.identity_dir = Path(folder) if folder is not None else None
        if self.identity_dir is not None:
            try:
                self._identity = write_identity(self.identity_dir, tcp, tls_cert)
            except BaseException:
                self.server_close()
                raise
        protocol: type[MarketProtocol] = type("MarketProtocol", (MarketProtocol,),
                                              {"limits": self.limits, "registry": self.registry})
        self.app = self.build_app()
        config = uvicorn.Config(self.app, http=protocol, ws="none", lifespan="off", log_config=None,
                                access_log=False, server_header=False, proxy_headers=False,
                                timeout_keep_alive=self.limits.keep_alive, timeout_graceful_shutdown=5,
                                backlog=self.limits.backlog)
        config.load()
        self._uvicorn = _Uvicorn(config, protocol, listeners, self.limits.header_timeout)
        self._thread: threading.Thread | None = None

    def build_app(self):
        """The ASGI application served: each market's subclass gives its own (built with
        :mod:`marketsched.platform.http`), keeping a ``ThreadPoolExecutor`` in ``app.state.pool``
        (shut down with the server)."""
        raise NotImplementedError(f"{type(self).__name__} names no application: define build_app()")

    # ------------------------------------------------------------------ sockets
    def _bind_tcp(self, host: str, port: int) -> socket.socket:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        s = socket.socket(family, kind, proto)
        self._sockets.append(s)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
        s.listen(self.limits.backlog)
        s.setblocking(False)
        return s

    def _bind_unix(self, path: Path) -> socket.socket:
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise OSError(f"{path} exists and is not a socket")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                with short_socket_path(path) as p:
                    probe.connect(p)
                raise OSError(f"another broker answers on {path}: one broker per data folder")
            except (ConnectionRefusedError, FileNotFoundError):
                path.unlink()  # left by a broker that is gone
            finally:
                probe.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sockets.append(s)
        with short_socket_path(path) as p:
            s.bind(p)
        self._unix_bound = True
        os.chmod(path, 0o666)  # anyone may connect; the broker identifies them by their uid
        s.listen(self.limits.backlog)
        s.setblocking(False)
        return s

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    @property
    def server_address(self) -> tuple[str, int]:
        return self.host, self.port

    def stats(self) -> dict:
        """Connection counts, for the health check."""
        r = self.registry
        return {"connections": len(r.conns), "max_connections": r.max, "evicted": r.evicted, "refused": r.refused}

    # ------------------------------------------------------------------ running
    def serve_in_thread(self) -> threading.Thread:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._uvicorn.serve()), name="http", daemon=True)
        self._thread.start()
        return self._thread

    def shutdown(self) -> None:
        """Stop serving (requests in progress get up to 5 s to finish) and close the sockets."""
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.app.state.pool.shutdown(wait=False)
        self.server_close()

    def server_close(self) -> None:
        if self._identity is not None and self.identity_dir is not None:
            remove_identity(self.identity_dir, self._identity)
            self._identity = None
        for s in self._sockets:
            s.close()
        self._sockets = []
        if self._unix_bound and self.socket_path is not None:
            self._unix_bound = False
            try:
                if stat.S_ISSOCK(os.lstat(self.socket_path).st_mode):
                    self.socket_path.unlink()
            except FileNotFoundError:
                pass
