"""RDMA transport over pyverbs (the only importer of pyverbs; imported lazily).

Replica side (``RdmaRingHost``): the ring lives in a memory region registered with
LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ; its address and rkey go to the primary in
the handshake ``params``. The primary then opens a data connection (like tcp) whose
hello carries its RC queue pair (QPN, PSN, GID, MTU); the replica creates a QP for
it, moves it to RTS, and answers ``ready`` with its own. Nothing else crosses that
connection: it stays open only to tell the replica when the session ends.

Primary side (``RdmaRemoteRing``): a local mirror MR; each placement is copied into
the mirror and written with IBV_WR_RDMA_WRITE (one write per contiguous range), then
the header (head, then write_seq: RC executes writes in order), and ``publish``
returns once the signaled header write completed: the responder acknowledged every
write before it, so the frames are in the replica's memory (``held``, the semi-sync
``received`` confirmation). ``read_ack`` is an IBV_WR_RDMA_READ of ack_seq.
Completions are polled with a bounded spin, then short sleeps; an error completion
is a TransportError, which the primary node turns into a reconnect through the
same resume path as tcp. ``close`` releases QP, MRs, CQ, PD and the device context
in that order.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import random
import ssl
import time
from collections import deque
from pathlib import Path

from bridge.errors import TransportError
from bridge.ring.layout import ACK_SEQ_AT, HEAD_AT, WRITE_SEQ_AT, init_region, region_bytes
from bridge.transport.base import NoLaneAnswers, NoLaneReceiver
from bridge.transport.sockets import ControlConnection, connect
from bridge.wire import control

try:  # pyverbs names its enums module differently from rdma-core 59 on
    import pyverbs.enums as e
except ImportError:  # pragma: no cover - newer rdma-core
    import pyverbs.libibverbs_enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

log = logging.getLogger(__name__)
PORT = 1
SEND_DEPTH = 512
SPIN_POLLS = 2000
POLL_SLEEP_S = 0.0001
COMPLETION_TIMEOUT_S = 10.0
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
    """Context, PD, CQ and the port facts of the first (or named) RDMA device."""

    def __init__(self, name: str | None = None) -> None:
        try:
            names = [d.name.decode() for d in get_device_list()]
        except PyverbsError as exc:
            raise TransportError(f"rdma transport: no RDMA here ({exc}); use --transport tcp or shm "
                                 "(`rdma-bridge doctor` explains)") from exc
        if not names:
            raise TransportError("rdma transport: no RDMA device; use --transport tcp or shm")
        self.name = name or names[0]
        self.ctx = Context(name=self.name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, SEND_DEPTH, None, None, 0)
        port = self.ctx.query_port(PORT)
        if port.state != e.IBV_PORT_ACTIVE:
            raise TransportError(f"rdma transport: {self.name} port {PORT} is not ACTIVE")
        self.mtu = int(port.active_mtu)
        self.fw = _firmware(self.name)
        self.gid_index = self._roce_v2_gid(port.gid_tbl_len)
        self.gid = str(self.ctx.query_gid(PORT, self.gid_index))

    def _roce_v2_gid(self, count: int) -> int:
        """The first RoCE v2 GID with an address (pitfall 3: a v1 GID cannot route)."""
        fallback = None
        for i in range(count):
            try:
                gid = str(self.ctx.query_gid(PORT, i))
                kind = self.ctx.query_gid_type(PORT, i)
            except PyverbsError:
                continue
            if gid.replace(":", "").strip("0") == "":
                continue
            if "V2" in str(kind).upper() or int(kind) == 1:
                return i
            fallback = i if fallback is None else fallback
        if fallback is None:
            raise TransportError(f"rdma transport: {self.name} has no usable GID")
        return fallback

    def rc_qp(self) -> QP:
        cap = QPCap(max_send_wr=SEND_DEPTH, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        return QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))

    def to_rts(self, qp: QP, psn: int, peer: dict) -> None:
        """Connect ``qp`` to the peer's; differences of MTU and firmware (pitfalls 2 and 6)
        are said in the log: the path uses the smaller MTU."""
        if int(peer["mtu"]) != self.mtu:
            log.warning("rdma transport: MTU differs (%s here, %s at the peer): using the smaller; make them equal "
                        "on both ends and along the path", self.mtu, peer["mtu"])
        if peer.get("fw") not in (None, self.fw):
            log.warning("rdma transport: firmware differs (%s here, %s at the peer): run the same driver and "
                        "firmware on both ends", self.fw, peer.get("fw"))
        attr = QPAttr(port_num=PORT)
        attr.qp_access_flags = ACCESS
        attr.path_mtu = min(self.mtu, int(peer["mtu"]))
        attr.dest_qp_num = int(peer["qpn"])
        attr.rq_psn = int(peer["psn"])
        attr.sq_psn = psn
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.min_rnr_timer = 14, 7, 7, 12
        from pyverbs.addr import GID

        route = GlobalRoute(dgid=GID(peer["gid"]), sgid_index=self.gid_index)
        route.hop_limit = 64
        attr.ah_attr = AHAttr(port_num=PORT, is_global=1, gr=route)
        qp.to_rts(attr)

    def facts(self, qp: QP, psn: int) -> dict:
        return {"qpn": qp.qp_num, "psn": psn, "gid": self.gid, "mtu": self.mtu, "fw": self.fw, "device": self.name}

    def close(self) -> None:
        for part in (self.cq, self.pd, self.ctx):
            part.close()


def _view(mr: MR, size: int) -> memoryview:
    return memoryview((ctypes.c_ubyte * size).from_address(mr.buf)).cast("B")


class RdmaRingHost(NoLaneReceiver):
    doorbell_fd = None  # a one-sided write wakes nobody: the consumer polls

    def __init__(self, ring_bytes: int, device: str | None = None) -> None:
        self.ring_bytes = ring_bytes
        self.dev = _Device(device)
        self.mr: MR | None = None
        self._qps: list[QP] = []
        self._retired: deque = deque(maxlen=2)  # memory of the last regions: a status read may still look
        self.fence()

    def params(self) -> dict:
        return {"addr": self.mr.buf, "rkey": self.mr.rkey, "bytes": len(self.region)}

    def fence(self) -> None:
        """Fresh memory for a new session: a new memory region (a new rkey) over new
        memory. The last region is deregistered and the queue pairs of earlier sessions
        closed, so a primary side of an earlier session gets access errors, never our
        ring: one-sided writes cannot be refused any other way."""
        for qp in list(self._qps):
            qp.close()
        size = region_bytes(self.ring_bytes)
        memory = mmap.mmap(-1, size)
        anchor = ctypes.c_char.from_buffer(memory)
        mr = MR(self.dev.pd, size, ACCESS, address=ctypes.addressof(anchor))
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
        qp, psn = self.dev.rc_qp(), random.getrandbits(24)
        self.dev.to_rts(qp, psn, peer)
        self._qps.append(qp)
        conn.send({"type": "ready", "auth": auth, "qp": self.dev.facts(qp, psn)})
        conn.sock.settimeout(None)
        try:
            conn.recv()  # returns (or raises) when the primary closes the session
        except Exception as exc:  # any end of the connection ends the session
            log.info("rdma transport: session from %s ended: %s", conn.peer, exc)
        finally:
            if qp in self._qps:
                self._qps.remove(qp)
            qp.close()

    def close(self) -> None:
        for qp in self._qps:
            qp.close()
        self.region.release()
        self.mr.close()
        self.dev.close()


class RdmaRemoteRing(NoLaneAnswers):
    answers_fd = None  # completions are polled: nothing to wait on

    def __init__(self, params: dict, replica_addr: tuple[str, int], ring_bytes: int, secret: str = "",
                 timeout_s: float = 10.0, device: str | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.remote_addr, self.rkey = int(params["addr"]), int(params["rkey"])
        self.dev = _Device(device)
        size = region_bytes(ring_bytes)
        self.mr = MR(self.dev.pd, size + 64, ACCESS)  # the mirror, and 8 bytes for READ results at the end
        self.mirror = _view(self.mr, size + 64)
        self._scratch = size
        self.qp, psn = self.dev.rc_qp(), random.getrandbits(24)
        self._sock = connect(replica_addr, timeout_s, tls)
        reply = control.client_handshake(ControlConnection(self._sock), secret, "data",
                                         session=params.get("session", ""), qp=self.dev.facts(self.qp, psn))
        if reply.get("type") != "ready" or not isinstance(reply.get("qp"), dict):
            raise TransportError(f"rdma transport: replica {replica_addr[0]}:{replica_addr[1]} refused the data "
                                 f"connection: {reply.get('reason', reply.get('type'))}")
        self.dev.to_rts(self.qp, psn, reply["qp"])
        self._outstanding = 0  # signaled work requests not yet completed
        self._unsignaled = 0  # posted since the last signaled one
        self._placed = 0  # the last write_seq whose header write completed

    def _post(self, opcode, offset: int, length: int, remote_offset: int, signaled: bool = False) -> None:
        """Post one work request. Only the last of a batch asks for a completion: RC
        completes in order, so its completion covers the unsignaled ones before it."""
        if self._unsignaled >= SEND_DEPTH // 2:
            signaled = True  # keep the send queue from filling with unreaped requests
        wr = SendWR(opcode=opcode, num_sge=1, sg=[SGE(self.mr.buf + offset, length, self.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED if signaled else 0)
        wr.set_wr_rdma(self.rkey, self.remote_addr + remote_offset)
        try:
            self.qp.post_send(wr)
        except PyverbsError as exc:
            raise TransportError(f"rdma transport: post_send: {exc}") from exc
        if signaled:
            self._outstanding += 1
            self._unsignaled = 0
        else:
            self._unsignaled += 1

    def write(self, offset: int, data) -> None:
        n = len(data)
        self.mirror[offset:offset + n] = data
        self._post(e.IBV_WR_RDMA_WRITE, offset, n, offset)

    def lane_target(self) -> None:
        """No ship lane writes over rdma: every placement takes the general path."""
        return None

    def publish(self, write_seq: int, head: int, confirm: bool = False) -> None:
        """Returns once the header write completed: every write is placed (its own confirmation)."""
        self.mirror[HEAD_AT:HEAD_AT + 4] = head.to_bytes(4, "little")
        self._post(e.IBV_WR_RDMA_WRITE, HEAD_AT, 4, HEAD_AT)
        self.mirror[WRITE_SEQ_AT:WRITE_SEQ_AT + 8] = write_seq.to_bytes(8, "little")
        self._post(e.IBV_WR_RDMA_WRITE, WRITE_SEQ_AT, 8, WRITE_SEQ_AT, signaled=True)
        self._drain()
        self._placed = write_seq

    def held(self, wanted: int = 0) -> int:
        """The last write_seq whose writes completed: the replica's memory holds it."""
        return self._placed

    def flush(self) -> None:
        if self._unsignaled:  # a zero-length write, signaled, fences what came before
            self._post(e.IBV_WR_RDMA_WRITE, 0, 0, 0, signaled=True)
        self._drain()

    def read_ack(self) -> int:
        self._post(e.IBV_WR_RDMA_READ, self._scratch, 8, ACK_SEQ_AT, signaled=True)
        self._drain()
        return int.from_bytes(self.mirror[self._scratch:self._scratch + 8], "little")

    last_ack = read_ack  # one RDMA READ: microseconds, no answer to wait for on a socket

    def _drain(self) -> None:
        """Wait for every signaled work request: spin a while, then sleep between polls."""
        polls, deadline = 0, time.monotonic() + COMPLETION_TIMEOUT_S
        while self._outstanding:
            n, wcs = self.dev.cq.poll(num_entries=min(self._outstanding, 16))
            for wc in wcs[:n]:
                if wc.status != e.IBV_WC_SUCCESS:
                    raise TransportError(f"rdma transport: work completion error status {wc.status} "
                                         f"(opcode {wc.opcode}): the link or the replica's QP is gone")
            self._outstanding -= n
            if n == 0:
                polls += 1
                if polls > SPIN_POLLS:
                    if time.monotonic() > deadline:
                        raise TransportError("rdma transport: no completion within "
                                             f"{COMPLETION_TIMEOUT_S:.0f}s")
                    time.sleep(POLL_SLEEP_S)

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass
        self.qp.close()
        self.mirror.release()
        self.mr.close()
        self.dev.close()
