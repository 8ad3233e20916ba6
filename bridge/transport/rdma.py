"""RDMA transport over pyverbs (it and its verbs.py alone import pyverbs, lazily).

Replica side (``RdmaRingHost``): the ring lives in a memory region registered with
LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ; its address and rkey go to the primary in
the handshake ``params``. The primary then opens a data connection (like tcp) whose
hello carries its RC queue pair (QPN, PSN, GID, MTU); the replica creates a QP for
it, moves it to RTS, and answers ``ready`` with its own. Nothing else crosses that
connection: it stays open only to tell the replica when the session ends.

Primary side (``RdmaRemoteRing``): a local mirror MR, which the ring producer frames into
itself (``producer_region``: no copy); each placement is queued as an RDMA WRITE
(contiguous ones merged), all posted as one
chain, and ``publish`` returns once its signaled last write completed: the responder
acknowledged every write, so the frames are in the replica's memory, where the consumer
takes each by its own seq and crc (``held``, the semi-sync ``received`` confirmation).
The header (write_seq and head) follows them only now and then (QueuePair.post_publish).
``read_ack`` is an RDMA READ of ack_seq.
Completions are polled (a spin); an error completion is a TransportError, which the
primary node turns into a reconnect through the same resume path as tcp. A ship lane
(``lane_target``) does the same in compiled code on the same queue pair.

Work requests go through ``QueuePair`` (bridge.transport.verbs; compiled:
bridge/transport/_verbs.pyx, picked by bridge.wire.native). pyverbs opens the device,
the protection domain and the memory regions in both.

An idle replica side sleeps (``sleep``, compiled queue pair only): it writes the ring
header's waiting word into the primary side's mirror (the data hello names it), looks at
its ring once more and waits on its queue pair's completion channel; a primary side that
finds the word set after a publish clears it and adds an RDMA WRITE with immediate data,
which consumes a posted receive and wakes it. A busy replica side sees plain writes only.
"""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import mmap
import os
import random
import ssl
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bridge.config import RdmaOptions
from bridge.errors import RdmaError, TransportError
from bridge.ring.layout import ACK_SEQ_AT, init_region, region_bytes
from bridge.transport import gids, verbs
from bridge.transport.base import LaneTarget, NoLaneAnswers, NoLaneReceiver
from bridge.transport.doorbell import drain, sleep_on_queue_pair
from bridge.transport.sockets import ControlConnection, connect
from bridge.wire import control, native

try:  # pyverbs names its enums module differently from rdma-core 59 on
    import pyverbs.enums as e
except ImportError:  # pragma: no cover - newer rdma-core
    import pyverbs.libibverbs_enums as e
from pyverbs.device import Context, get_device_list
from pyverbs.pyverbs_error import PyverbsError

log = logging.getLogger(__name__)
PART = "rdma queue pair"
_compiled = native.pick(PART)
COMPILED = _compiled is not None
VERBS = _compiled if _compiled is not None else verbs  # its Domain, memory regions and QueuePair
SEND_DEPTH = 512
HUGE_PAGE_BYTES = 2 << 20
SOFTWARE_VENDOR_IDS = (0xFFFFFF, 0x626D74)  # rdma_rxe's RXE_VENDOR_ID, siw's SIW_VENDOR_ID
WAKE_RECVS = 64  # receives the replica side keeps posted for the primary side's wakeups
INLINE_BYTES = 256  # asked for; the device may give less (QueuePair.max_inline)
COMPLETION_TIMEOUT_S = 10.0
# an idle replica side's longest sleep in one call: no wakeup is missed (the primary side
# looks at the word after its frames' write completed, this side at the ring after its
# word's write completed), and a new session, a stop or a close interrupt it
SLEEP_S = 1.0
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def _firmware(device: str) -> str:
    try:
        return Path(f"/sys/class/infiniband/{device}/fw_ver").read_text().strip()
    except OSError:
        return "unknown"


def devices_present() -> bool:
    try:
        return bool(get_device_list())
    except PyverbsError:  # a kernel without RDMA support
        return False


class _Device:
    """An RDMA device (pyverbs): its active ports' GID tables, its protection domain
    (``VERBS.Domain``), where memory is registered and queue pairs are opened, and the
    route (port, GID) each queue pair takes (bridge.transport.gids decides).

    Without ``--rdma-device`` the device is the one with a GID of ``local_address`` (the
    control connection's end on the primary side; the listen address on the replica side),
    else the first one listed."""

    def __init__(self, options: RdmaOptions = RdmaOptions(), local_address: str = "") -> None:
        try:
            names = [d.name.decode() for d in get_device_list()]
        except PyverbsError as exc:
            raise TransportError(f"rdma transport: no RDMA here ({exc}); use --transport tcp or shm "
                                 "(`rdma-bridge doctor` explains)") from exc
        if not names:
            raise TransportError("rdma transport: no RDMA device; use --transport tcp or shm")
        self.options = options
        several = len(names) > 1 and options.device is None  # only then do the tables decide
        self.name = gids.pick_device({n: _device_table(n) if several else [] for n in names}, options.device,
                                     local_address)
        self.ctx = Context(name=self.name)
        self.table, self._ports = _gid_table(self.ctx)
        if not self.table:
            raise TransportError(f"rdma transport: {self.name} has no active port with a GID (`ibv_devinfo -v` "
                                 "shows its ports)")
        self.fw = _firmware(self.name)
        # Soft-RoCE and soft-iWARP (their vendor ids; a NIC completes by itself, these in kernel tasks)
        self.soft = self.ctx.query_device().vendor_id in SOFTWARE_VENDOR_IDS or self.name.startswith(("rxe", "siw"))
        self.domain = VERBS.Domain(self.name)

    def route(self, local_address: str) -> gids.Route:
        """The port and GID of a queue pair whose control connection ends at ``local_address`` here."""
        return gids.choose(self.table, self.name, local_address, self.options.port, self.options.gid_index)

    def rc_qp(self, wake_recvs: int = 0):
        qp = VERBS.QueuePair(self.domain, SEND_DEPTH, INLINE_BYTES, wake_recvs)
        qp.soft = self.soft
        return qp

    def register(self, memory: mmap.mmap):
        """``memory`` registered for local and remote writes and remote reads; the caller
        keeps it (and the returned anchor) alive while the region lives."""
        anchor = ctypes.c_char.from_buffer(memory)
        return self.domain.register(ctypes.addressof(anchor), len(memory), ACCESS), anchor

    def to_rts(self, qp, psn: int, route: gids.Route, peer: dict) -> Marking:
        """Connect ``qp`` to the peer's over ``route``; differences of MTU and firmware
        (pitfalls 2 and 6) are said in the log: the path uses the smaller MTU. The packets'
        traffic class and service level: this side's options, else the peer's (the primary
        side's, which it sends), else 0."""
        gids.check_reach(route.entry, str(peer.get("gid", "")), str(peer.get("link_layer", gids.ETHERNET)))
        mtu, lid = self._ports[route.port]
        if int(peer["mtu"]) != mtu:
            log.warning("rdma transport: MTU differs (%s here, %s at the peer): using the smaller; make them equal "
                        "on both ends and along the path", mtu, peer["mtu"])
        if peer.get("fw") not in (None, self.fw):
            log.warning("rdma transport: firmware differs (%s here, %s at the peer): run the same driver and "
                        "firmware on both ends", self.fw, peer.get("fw"))
        marking = Marking.of(self.options, peer)
        dgid = ipaddress.IPv6Address(str(peer["gid"])).packed
        dlid = int(peer.get("lid", 0)) if route.entry.link_layer == gids.INFINIBAND else 0
        qp.connect(route.port, ACCESS, min(mtu, int(peer["mtu"])), int(peer["qpn"]), int(peer["psn"]), psn, dgid,
                   route.index, marking.traffic_class, marking.service_level, dlid,
                   14, 7, 7, 12)  # timeout, retry_cnt, rnr_retry (7: for ever), min_rnr_timer
        return marking

    def facts(self, qp, psn: int, route: gids.Route, mirror=None) -> dict:
        """What the peer needs to connect its queue pair to ``qp`` (the primary side: and
        where its mirror is, for the replica side's waiting word, and how to mark packets)."""
        mtu, lid = self._ports[route.port]
        out = {"qpn": qp.qp_num, "psn": psn, "gid": route.entry.gid, "mtu": mtu, "fw": self.fw, "device": self.name,
               "port": route.port, "gid_index": route.index, "link_layer": route.entry.link_layer, "lid": lid}
        if self.options.traffic_class is not None:
            out["traffic_class"] = self.options.traffic_class
        if self.options.service_level is not None:
            out["service_level"] = self.options.service_level
        if mirror is not None:
            out["mirror"] = {"addr": mirror.buf, "rkey": mirror.rkey}
        return out

    def describe(self, route: gids.Route, marking: Marking) -> dict:
        """Where a queue pair runs, as the log line, ``status`` and ``doctor`` say it."""
        return {"device": self.name, "port": route.port, "gid_index": route.index, "gid": str(route.entry),
                "link_layer": route.entry.link_layer, "roce_v2": route.entry.roce_v2, "chosen_by": route.reason,
                "traffic_class": marking.traffic_class, "service_level": marking.service_level}

    def mtu_of(self, route: gids.Route) -> int:
        """The port's active MTU (the verbs' enum: 1 is 256 bytes, 5 is 4096)."""
        return self._ports[route.port][0]

    def close(self) -> None:
        self.domain.close()
        self.ctx.close()


@dataclass(frozen=True, slots=True)
class Marking:
    """How a queue pair's packets are marked: the IP traffic class (DSCP << 2) and the
    service level (on RoCE the priority a VLAN tag carries; on InfiniBand the virtual lane)."""
    traffic_class: int = 0
    service_level: int = 0

    @classmethod
    def of(cls, options: RdmaOptions, peer: dict) -> Marking:
        tc = options.traffic_class if options.traffic_class is not None else int(peer.get("traffic_class", 0))
        sl = options.service_level if options.service_level is not None else int(peer.get("service_level", 0))
        return cls(tc, sl)


def _gid_table(ctx) -> tuple[list[gids.GidEntry], dict[int, tuple[int, int]]]:
    """The non-zero GIDs of ``ctx``'s active ports, and each such port's (active MTU, LID)."""
    entries, ports = [], {}
    for port in range(1, ctx.query_device().phys_port_cnt + 1):
        attr = ctx.query_port(port)
        if attr.state != e.IBV_PORT_ACTIVE:
            continue
        ports[port] = (int(attr.active_mtu), int(attr.lid))
        layer = gids.INFINIBAND if int(attr.link_layer) == int(e.IBV_LINK_LAYER_INFINIBAND) else gids.ETHERNET
        for i in range(attr.gid_tbl_len):
            try:
                gid = str(ctx.query_gid(port, i))
                kind = ctx.query_gid_type(port, i) if layer == gids.ETHERNET else 0
            except PyverbsError:
                continue  # an empty slot (rxe, mlx5 answer so)
            if gid.replace(":", "").strip("0") == "":
                continue
            entries.append(gids.GidEntry(port, i, gid, "V2" in str(kind).upper() or int(kind) == 1, layer))
    return entries, ports


def _device_table(name: str) -> list[gids.GidEntry]:
    """The GIDs of the device ``name`` (a context opened and closed for it)."""
    ctx = Context(name=name)
    try:
        return _gid_table(ctx)[0]
    finally:
        ctx.close()


def _ring_memory(size: int) -> mmap.mmap:
    """Anonymous memory for a ring or its mirror, in transparent huge pages where the host
    has them (``madvise``: a 2 MiB page per TLB entry instead of 512 4 KiB ones, for the NIC's
    translation too; a host without them keeps small pages)."""
    memory = mmap.mmap(-1, size)
    if size >= HUGE_PAGE_BYTES and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            memory.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # transparent huge pages off: small pages, as before
    return memory


def _view(mr, size: int) -> memoryview:
    return memoryview((ctypes.c_ubyte * size).from_address(mr.buf)).cast("B")


class RdmaRingHost(NoLaneReceiver):
    doorbell_fd = None  # a one-sided write wakes nobody: an idle consumer sleeps through ``sleep``

    def __init__(self, ring_bytes: int, options: RdmaOptions = RdmaOptions(), listen_address: str = "") -> None:
        self.ring_bytes = ring_bytes
        self.dev = _Device(options, listen_address)
        self.route: dict = {}  # where the current session's queue pair runs (``_Device.describe``)
        self.mr = None
        self._qps: list = []
        self._waker = None  # the current session's queue pair, where it can sleep (its primary side's mirror known)
        self._lock = threading.Lock()  # the waker between the session's thread (closing it) and the consumer's
        self._woke_before = 0  # wakeups that woke the consumer in the sessions that ended
        self._interrupt = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)  # a sleep cut short: a new session, stop
        self._retired: deque = deque(maxlen=2)  # memory of the last regions: a status read may still look
        self.fence()

    def params(self) -> dict:
        return {"addr": self.mr.buf, "rkey": self.mr.rkey, "bytes": len(self.region)}

    def fence(self) -> None:
        """Fresh memory for a new session: a new memory region (a new rkey) over new
        memory. The last region is deregistered and the queue pairs of earlier sessions
        closed, so a primary side of an earlier session gets access errors, never our
        ring: one-sided writes cannot be refused any other way."""
        with self._lock:
            for qp in list(self._qps):
                qp.close()
            self._waker = None
        self.interrupt()
        size = region_bytes(self.ring_bytes)
        memory = _ring_memory(size)
        mr, anchor = self.dev.register(memory)
        if self.mr is not None:
            self.mr.close()
            self._retired.append(self._memory)
        self.mr, self._memory = mr, (memory, anchor)
        self.region = _view(self.mr, size)
        init_region(self.region, self.ring_bytes)

    def accept(self, conn: ControlConnection, auth: str = "", msg: dict | None = None) -> None:
        peer = (msg or {}).get("qp")
        if not isinstance(peer, dict):
            raise TransportError(f"rdma transport: data hello from {conn.peer} carries no queue pair")
        route = self.dev.route(conn.sock.getsockname()[0])
        qp, psn = self.dev.rc_qp(WAKE_RECVS), random.getrandbits(24)
        try:
            marking = self.dev.to_rts(qp, psn, route, peer)
        except TransportError as exc:
            qp.close()
            conn.send({"type": "error", "reason": str(exc)})  # the primary side says it too
            raise
        self.route = self.dev.describe(route, marking)
        log.info("rdma transport: queue pair %d for %s: %s", qp.qp_num, conn.peer, gids.said(self.route))
        mirror = peer.get("mirror")
        with self._lock:
            self._qps.append(qp)
            if isinstance(mirror, dict):
                qp.bind(self.mr, int(mirror["addr"]), int(mirror["rkey"]), COMPLETION_TIMEOUT_S)
                self._waker = qp if qp.lane_sleeper is not None else None
        self.interrupt()  # a consumer asleep on no session, or the last one's, looks at this one
        conn.send({"type": "ready", "auth": auth, "qp": self.dev.facts(qp, psn, route)})
        conn.sock.settimeout(None)
        try:
            conn.recv()  # returns (or raises) when the primary closes the session
        except Exception as exc:  # any end of the connection ends the session
            log.info("rdma transport: session from %s ended: %s", conn.peer, exc)
        finally:
            with self._lock:
                if self._waker is qp:
                    self._waker = None
                if qp in self._qps:
                    self._qps.remove(qp)
                    self._woke_before += qp.wakeups
                    qp.close()
            self.interrupt()

    def sleep(self, has_work: Callable[[], bool], timeout_s: float = SLEEP_S) -> bool:
        """Until the primary side wakes this side, ``interrupt`` or ``timeout_s``: False where
        it cannot (no session, pyverbs' queue pair, a broken one), and the caller polls.
        This side says it sleeps (its waiting word written into the primary side's mirror)
        once, and again only after a wakeup, which the primary side sends once per time it
        finds the word set, clearing it: a timeout with nothing to do costs no write, and a
        burst while the word is up costs one wakeup, never more receives than are posted
        (the queue pair's sleeper, shared with the compiled apply lane: bridge_verbs.h).
        RdmaError where a receive of its queue pair completed in error (the queue pair is in
        the error state: every later sleep would return at once): the caller ends the session."""
        drain(self._interrupt)  # before the session is looked up: one that comes after it interrupts
        qp = self.lane_sleeper()
        if qp is not None and qp.sleep_failure:
            with self._lock:
                if self._waker is qp:
                    self._waker = None  # said once: the session ends, the next one brings a new queue pair
            raise RdmaError(f"{qp.sleep_failure}; the session ends")
        return qp is not None and sleep_on_queue_pair(qp, has_work, timeout_s, self._interrupt)

    @property
    def lane_interrupt_fd(self) -> int:
        """What ``interrupt`` makes readable: an idle apply lane asleep on the queue pair waits on it too."""
        return self._interrupt

    def lane_sleeper(self):
        """The current session's queue pair, where this side can sleep on it (the compiled
        one, its primary side's mirror known), else None."""
        with self._lock:
            return self._waker

    def interrupt(self) -> None:
        """A sleep (``sleep``) under way cut short (one that starts later looks at what
        changed before it waits: its caller's ``has_work``, the session)."""
        try:
            os.write(self._interrupt, (1).to_bytes(8, "little"))
        except OSError:
            pass  # closed, or already rung

    @property
    def wakeups(self) -> int:
        """Writes with immediate data that woke the consumer (a busy one sees none)."""
        with self._lock:
            return self._woke_before + sum(qp.wakeups for qp in self._qps)

    def close(self) -> None:
        with self._lock:
            for qp in self._qps:
                qp.close()
            self._qps, self._waker = [], None
        if self._interrupt >= 0:
            self.interrupt()
            os.close(self._interrupt)
            self._interrupt = -1
        self.region.release()
        self.mr.close()
        self.dev.close()


class RdmaRemoteRing(NoLaneAnswers):
    answers_fd = None  # completions are polled: nothing to wait on

    def __init__(self, params: dict, replica_addr: tuple[str, int], ring_bytes: int, secret: str = "",
                 timeout_s: float = 10.0, options: RdmaOptions = RdmaOptions(),
                 tls: ssl.SSLContext | None = None) -> None:
        self.remote_addr, self.rkey = int(params["addr"]), int(params["rkey"])
        self._sock = connect(replica_addr, timeout_s, tls)  # first: its local address picks device, port and GID
        try:
            self._open(params, replica_addr, ring_bytes, secret, options)
        except BaseException:
            self._sock.close()
            raise

    def _open(self, params: dict, replica_addr: tuple[str, int], ring_bytes: int, secret: str,
              options: RdmaOptions) -> None:
        local = self._sock.getsockname()[0]
        self.dev = _Device(options, local)
        route = self.dev.route(local)
        self._size = size = region_bytes(ring_bytes)
        self._memory = _ring_memory(size + 64)  # the mirror, and 8 bytes for READ results at the end
        self._framed_here = False  # the producer frames into the mirror itself (``producer_region``)
        self.mr, self._anchor = self.dev.register(self._memory)
        self.mirror = _view(self.mr, size + 64)
        self._scratch = size
        self.qp, psn = self.dev.rc_qp(), random.getrandbits(24)
        self.qp.bind(self.mr, self.remote_addr, self.rkey)
        reply = control.client_handshake(ControlConnection(self._sock), secret, "data",
                                         session=params.get("session", ""),
                                         qp=self.dev.facts(self.qp, psn, route, self.mr))
        if reply.get("type") != "ready" or not isinstance(reply.get("qp"), dict):
            raise TransportError(f"rdma transport: replica {replica_addr[0]}:{replica_addr[1]} refused the data "
                                 f"connection: {reply.get('reason', reply.get('type'))}")
        marking = self.dev.to_rts(self.qp, psn, route, reply["qp"])
        self._placed = self._published = 0  # the last write_seq whose frames' write completed; ... posted
        self.route = self.dev.describe(route, marking)
        peer_mtu = min(self.dev.mtu_of(route), int(reply["qp"]["mtu"]))
        log.info("rdma transport: queue pair %d to %s on %s (%s): %s, MTU %d, inline writes up to %d bytes, %s",
                 self.qp.qp_num, replica_addr[0], reply["qp"].get("device", "?"), reply["qp"].get("gid", "?"),
                 gids.said(self.route), 128 << peer_mtu, self.qp.max_inline,
                 "compiled" if self.qp.lane_path is not None else "through pyverbs")

    def producer_region(self) -> memoryview:
        """The mirror's ring part, for the producer to frame into: its one-sided writes then
        read the frames where they were framed (one copy fewer). A view of the mmap itself, so
        the memory stays mapped while the producer holds it (a new session's resend reads the
        last session's frames after its remote closed); from then on ``write`` copies nothing."""
        self._framed_here = True
        return memoryview(self._memory)[:self._size]

    def write(self, offset: int, data) -> None:
        n = len(data)
        if not self._framed_here:  # else ``data`` is already there: the producer frames into the mirror
            self.mirror[offset:offset + n] = data
        self.qp.place(offset, n)

    def lane_target(self) -> LaneTarget:
        """What a ship lane writes itself: the mirror (its region's part; the replica's ring
        has its layout) and the queue pair that writes it there; the completion of its
        frames' write is its confirmation (the lane may send semi-sync `received` ACKs)."""
        return LaneTarget(remote=self.mirror[:self._size], verbs=self.qp, confirms=True)

    def lane_published(self, write_seq: int) -> None:
        """A lane published up to ``write_seq``: held once its completion is seen (a fan-out
        lane waits for the first ring's and a quorum's, not for every further one's)."""
        self._published = max(self._published, write_seq)

    def publish(self, write_seq: int, head: int, confirm: bool = False) -> None:
        """Returns once the frames' write completed: every write is placed (its own confirmation)."""
        self.qp.publish(write_seq, head, COMPLETION_TIMEOUT_S)  # and wakes the replica side where it sleeps
        self._placed = self._published = write_seq

    def held(self, wanted: int = 0) -> int:
        """The last write_seq whose writes completed: the replica's memory holds it (a lane's
        publish whose completion had not come yet is looked for here, without waiting)."""
        if self._placed < self._published and self.qp.reap():
            self._placed = self._published
        return self._placed

    def flush(self) -> None:
        self.qp.fence(COMPLETION_TIMEOUT_S)

    def read_ack(self) -> int:
        return self.qp.read_u64(self._scratch, ACK_SEQ_AT, COMPLETION_TIMEOUT_S)

    last_ack = read_ack  # one RDMA READ: microseconds, no answer to wait for on a socket

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass
        self.qp.close()
        self.mirror.release()
        self.mr.close()
        self.dev.close()
