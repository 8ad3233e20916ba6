"""Same-host transport: the replica's ring is a file in /dev/shm that the primary
maps and writes directly (stores are visible to the consumer without a syscall).
A FIFO beside it is the doorbell that wakes a sleeping consumer (doorbell.py)."""

from __future__ import annotations

import mmap
import os
import secrets
from pathlib import Path

from bridge.errors import RemoteProtocolError, TransportError, VersionSkew
from bridge.ring.layout import (
    ACK_SEQ_AT,
    WRITE_SEQ_AT,
    init_region,
    is_retired,
    read_ring_header,
    read_u64,
    region_bytes,
    retire_region,
    write_publish,
)
from bridge.transport.base import DoorbellSleep, LaneTarget, NoLaneAnswers, NoLaneReceiver
from bridge.transport.doorbell import Doorbell

SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")


def remove_stale_rings() -> list[Path]:
    """Rings (and doorbells) left by replica processes that died without closing (kill -9)."""
    removed = []
    for path in SHM_DIR.glob("rdma-bridge-*-*"):
        pid = path.name.split("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


class ShmRingHost(DoorbellSleep, NoLaneReceiver):
    def __init__(self, ring_bytes: int) -> None:
        remove_stale_rings()
        self.ring_bytes = ring_bytes
        self.bell_path = SHM_DIR / f"rdma-bridge-{os.getpid()}-{secrets.token_hex(4)}-bell"
        self.doorbell = Doorbell.fifo(self.bell_path, create=True)
        self.path: Path | None = None
        self.fence()

    @property
    def doorbell_fd(self) -> int:
        return self.doorbell.fd

    def params(self) -> dict:
        return {"path": str(self.path), "doorbell": str(self.bell_path)}

    def fence(self) -> None:
        """Fresh memory for a new session: a new ring file. The last one is unlinked, so a
        primary side of an earlier session, which may still map it, writes where nobody
        reads (its mapping is freed when the last reference to it goes), and its magic is
        zeroed first, so that writer's ``held`` says the ring is retired."""
        old, old_region = self.path, getattr(self, "region", None)
        self.path = self.bell_path.with_name(f"rdma-bridge-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, region_bytes(self.ring_bytes))
            self._mm = mmap.mmap(fd, region_bytes(self.ring_bytes))
        finally:
            os.close(fd)
        self.region = memoryview(self._mm)
        init_region(self.region, self.ring_bytes)
        if old_region is not None:
            retire_region(old_region)
        if old is not None:
            old.unlink(missing_ok=True)

    def accept(self, conn, auth: str = "", msg: dict | None = None) -> None:
        """No data connection: the primary side maps the ring file itself."""
        raise RemoteProtocolError(f"shm transport: a data connection from {conn.peer}, but the ring is shared "
                                  "memory on this host (the primary side maps it)")

    def close(self) -> None:
        self.path.unlink(missing_ok=True)
        self.doorbell.close()
        self.bell_path.unlink(missing_ok=True)


class ShmRemoteRing(NoLaneAnswers):
    answers_fd = None  # nothing to wait for: the replica's ring header is read here directly

    def __init__(self, params: dict, ring_bytes: int) -> None:
        path = params.get("path", "")
        if not str(path).startswith(str(SHM_DIR) + "/rdma-bridge-"):
            raise TransportError(f"shm transport: replica offered an unexpected path {path!r}")
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise TransportError(f"shm transport: open {path}: {exc.strerror} (is the replica on this host?)") from exc
        try:
            self._mm = mmap.mmap(fd, region_bytes(ring_bytes))
        except (OSError, ValueError) as exc:
            raise TransportError(f"shm transport: map {path}: {exc}") from exc
        finally:
            os.close(fd)
        self._view = memoryview(self._mm)
        self._path = path
        try:
            read_ring_header(self._view)  # the layout this side writes, and a ring no new session retired
            self._bell = _open_doorbell(str(params.get("doorbell", "")), str(path))
        except VersionSkew as exc:
            self.close_view()
            raise TransportError(f"shm transport: {path}: {exc}") from exc
        except TransportError:
            self.close_view()
            raise

    def write(self, offset: int, data) -> None:
        self._view[offset:offset + len(data)] = data

    def publish(self, write_seq: int, head: int, confirm: bool = False) -> None:
        """The placement is its own confirmation: the stores are in the replica's ring."""
        write_publish(self._view, write_seq, head)
        self._bell.ring(self._view)

    def producer_region(self) -> None:
        """None: the producer frames into memory of its own (its frames are copied or sent)."""
        return None

    def lane_target(self) -> LaneTarget:
        """What a ship lane (bridge.source.ship) writes and rings itself: the shared ring,
        and the doorbell's fd; its stores are their own confirmation (the lane may send
        semi-sync `received` ACKs itself)."""
        return LaneTarget(remote=self._view, doorbell=self._bell.fd, confirms=True)

    def held(self, wanted: int = 0) -> int:
        """What the replica's ring holds: its header's write_seq, read in the shared mapping;
        a ring the replica side retired (a new session fenced this one off) holds nothing."""
        if is_retired(self._view):
            raise TransportError(f"shm transport: the replica side retired the ring {self._path} (a new session "
                                 "fenced this one off): nothing written to it is held")
        return read_u64(self._view, WRITE_SEQ_AT)

    def flush(self) -> None:
        """Stores to a shared mapping are visible at once (x86 TSO keeps their order)."""

    def read_ack(self) -> int:
        return read_u64(self._view, ACK_SEQ_AT)

    last_ack = read_ack  # a memory read: never a wait

    def close_view(self) -> None:
        self._view.release()
        self._mm.close()

    def close(self) -> None:
        self.close_view()
        self._bell.close()


def _open_doorbell(bell: str, ring_path: str) -> Doorbell:
    """The replica's FIFO, which its welcome names beside the ring."""
    owner = ring_path.rsplit("-", 1)[0] + "-"  # the replica process's prefix: rdma-bridge-<pid>-
    if not (bell.startswith(owner) and bell.endswith("-bell") and "/" not in bell[len(owner):]):
        raise TransportError(f"shm transport: replica offered an unexpected doorbell {bell!r}")
    try:
        return Doorbell.fifo(bell)
    except OSError as exc:
        raise TransportError(f"shm transport: open doorbell {bell}: {exc.strerror}") from exc
