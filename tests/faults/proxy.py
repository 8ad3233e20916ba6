"""A TCP fault proxy for tests and the soak: sits between the primary side and the
replica's control/data port, or between a bridge and a MySQL server, and injects
faults on demand: cut (drop every connection), stall (stop forwarding), delay (per
chunk latency), corrupt (flip one byte N bytes into the client→server stream). A stall
may hold one direction only (the replica side's answers, say, while placements flow).
Loopback only; counts what it injected."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter


class FaultProxy:
    def __init__(self, target: tuple[str, int], listener: socket.socket | None = None) -> None:
        """``listener``: a listening socket made elsewhere (in another network namespace, say)
        in place of one on 127.0.0.1 here; connections to ``target`` are made from this one."""
        self.target = target
        self.listener = listener or socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.injected: Counter = Counter()
        self.delay_s = 0.0
        self._flowing = {True: threading.Event(), False: threading.Event()}  # upstream, downstream
        self.flow()
        self._corrupt_after: int | None = None
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    # --- faults ------------------------------------------------------------

    def cut(self) -> int:
        """Reset every open connection (new ones are accepted)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                _close(s)
        self.injected["cut"] += 1
        return len(pairs)

    def stall(self, seconds: float | None, direction: str = "both") -> None:
        """Stop forwarding for ``seconds`` (None: until ``flow``), connections kept open: in
        both directions, or only "up" (client→server) or "down" (server→client)."""
        self.injected["stall"] += 1
        for upstream in {"both": (True, False), "up": (True,), "down": (False,)}[direction]:
            self._flowing[upstream].clear()
        if seconds is not None:
            threading.Timer(seconds, self.flow).start()

    def flow(self) -> None:
        """Forward again in both directions."""
        for event in self._flowing.values():
            event.set()

    def delay(self, seconds: float) -> None:
        self.injected["delay"] += 1 if seconds else 0
        self.delay_s = seconds

    def corrupt(self, after_bytes: int) -> None:
        """Flip one byte of client→server traffic, ``after_bytes`` bytes from now."""
        with self._lock:
            self._corrupt_after = after_bytes

    # --- plumbing ------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:  # target down (a server restarting): refuse this client
                _close(client)
                continue
            server.settimeout(None)
            for s in (client, server):  # no Nagle: the proxy must not add 40 ms round trips
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._flowing[upstream].wait()
                if self.delay_s:
                    time.sleep(self.delay_s)
                if upstream:
                    data = self._maybe_corrupt(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)

    def _maybe_corrupt(self, data: bytes) -> bytes:
        with self._lock:
            at = self._corrupt_after
            if at is None:
                return data
            if at >= len(data):
                self._corrupt_after = at - len(data)
                return data
            self._corrupt_after = None
        self.injected["corrupt"] += 1
        flipped = bytearray(data)
        flipped[at] ^= 0x5A
        return bytes(flipped)

    def close(self) -> None:
        self._closed = True
        self.flow()
        _close(self.listener)
        self.cut()


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
