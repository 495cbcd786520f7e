"""Loopback TCP proxies in front of a real PostgreSQL that forward the start-up and then go silent (SilentProxy) or
slow (SlowProxy).

It stands for a frozen VM, a stuck pooler or a half-open connection: the connection is accepted and the session starts
(so `connect_timeout` is passed), then nothing more is forwarded in either direction while both sockets stay open.
The kernel still acknowledges what the client sends, so no TCP-level setting notices: only a client-side deadline
ends the call. `release()` closes every socket (what a test does when its deadline has passed, so a hung call ends
and the test fails instead of hanging).

SlowProxy stands for an overloaded server: after the start-up it forwards everything, but each answer only after a
delay, so every call ends within its bound and only a deadline on the work as a whole ends a long series of them.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from radar_pipeline.config import Target

# The server's first ReadyForQuery ('Z', length 5, then the status byte): the start-up is over.
READY_FOR_QUERY = b"Z\x00\x00\x00\x05"


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Forward source to sink until either ends, then shut both down (a plain proxy's one direction)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            _shut(sock)


def close_all(sockets: list[socket.socket]) -> None:
    """Shut down and close each socket: a call waiting on one sees its connection end."""
    for sock in sockets:
        _shut(sock)
        sock.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class SilentProxy:
    """Listens on 127.0.0.1; each client gets its own upstream connection, silent once the session has started."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = [self._listener]
        self._lock = threading.Lock()
        self.silenced = threading.Event()  # set when a session has started and the proxy went silent on it
        self._closed = False
        threading.Thread(target=self._accept, name="silent-proxy", daemon=True).start()

    def target(self, real: Target, password: str = "s3cret-pw") -> Target:
        """`real` reached through this proxy, its URL given a password (trust authentication ignores it) so a test
        can check the password is never shown."""
        parts = urlsplit(real.dsn)
        user = parts.username or "postgres"
        netloc = f"{user}:{password}@127.0.0.1:{self.port}"
        return Target(real.name, urlunsplit((parts.scheme, netloc, parts.path, "sslmode=disable", "")))

    def release(self) -> None:
        """Close every socket: a call still waiting on the proxy sees the connection end."""
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        close_all(sockets)

    def __enter__(self) -> SilentProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _keep(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                sock.close()
                return False
            self._sockets.append(sock)
            return True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # released
            if not self._keep(client):
                return
            try:
                server = socket.create_connection(self._upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            if not self._keep(server):
                return
            started = threading.Event()
            threading.Thread(target=self._to_server, args=(client, server, started), daemon=True).start()
            threading.Thread(target=self._to_client, args=(server, client, started), daemon=True).start()

    def _to_server(self, client: socket.socket, server: socket.socket, started: threading.Event) -> None:
        """Client to server until the session has started; afterwards nothing is read from the client at all (its
        bytes sit in the kernel's buffer, acknowledged)."""
        self._forward(client, server, lambda: not started.is_set())

    def _forward(self, client: socket.socket, server: socket.socket, going: Callable[[], bool]) -> None:
        """Client to server while going()."""
        while going():
            try:
                client.settimeout(0.05)
                data = client.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            try:
                server.sendall(data)
            except OSError:
                return

    def _to_client(self, server: socket.socket, client: socket.socket, started: threading.Event) -> None:
        """Server to client up to and including the first ReadyForQuery, then silence."""
        seen = b""
        while True:
            try:
                data = server.recv(65536)
            except OSError:
                return
            if not data:
                return
            seen += data
            end = seen.find(READY_FOR_QUERY)
            if end >= 0 and len(seen) > end + len(READY_FOR_QUERY):
                keep = len(data) - (len(seen) - (end + len(READY_FOR_QUERY) + 1))
                started.set()
                try:
                    client.sendall(data[:keep])
                except OSError:
                    pass
                self.silenced.set()
                self._after_start(server, client, data[keep:])
                return
            try:
                client.sendall(data)
            except OSError:
                return

    def _after_start(self, server: socket.socket, client: socket.socket, pending: bytes) -> None:
        """What becomes of the server's answers once the session has started: nothing, here."""


class SlowProxy(SilentProxy):
    """Like SilentProxy up to the start-up; then every query reaches the server at once and each chunk of its answer
    reaches the client `delay` seconds after the server sent it. `silenced` is set when a session has started, and
    `answers` counts the chunks delayed."""

    def __init__(self, upstream_host: str, upstream_port: int, delay: float) -> None:
        self.delay = delay
        self.answers = 0
        super().__init__(upstream_host, upstream_port)

    def _to_server(self, client: socket.socket, server: socket.socket, started: threading.Event) -> None:
        self._forward(client, server, lambda: not self._closed)

    def _after_start(self, server: socket.socket, client: socket.socket, pending: bytes) -> None:
        data = pending
        while True:
            if data:
                time.sleep(self.delay)  # the overloaded server's slowness, not a test's wait
                self.answers += 1
                try:
                    client.sendall(data)
                except OSError:
                    return
            try:
                data = server.recv(65536)
            except OSError:
                return
            if not data:
                return
