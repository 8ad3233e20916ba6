"""The rdma transport's protection domain, memory regions and RC queue pairs, and what a
queue pair does with the replica's ring (pure-Python twin of ``_verbs.pyx``, over pyverbs):
what bridge.transport.rdma and the ship lane post and poll.

A queue pair's path goes from a registered local buffer (``bind``: the primary side's
mirror, or the replica side's ring) to a remote one with the same layout: a byte at
offset o here goes to offset o there. ``place`` queues an RDMA WRITE of a range (one that
continues the last one queued is merged into it); ``publish`` posts the chain with only
its last request signaled and polls the send completion queue until it completed: the
responder acknowledged every write, so the frames are in the replica's memory, where its
consumer takes each by its own seq and crc. The ring's header (write_seq and head, side
by side) is stored in the mirror at every publish and written there after the frames,
unsignaled and inline, with every HEADER_EVERY-th (a hint: every work request costs about
a round trip on Soft-RoCE, and a second one per placement doubled its latency) and with a
``fence``; signaled with every publish where the device writes nothing inline. Writes up
to the device's ``max_inline`` go inline (copied at the post). An error completion is an
RdmaError (the link or the peer's queue pair is gone).

The replica side's queue pair may sleep (``wake_recvs``): it writes its ring's waiting
word into the primary side's mirror, and a primary side that finds it
set after a publish clears it and adds a zero-length RDMA WRITE with immediate data, which
consumes one of the replica side's posted receives: an event on its completion channel,
whose fd ``sleep_prepare`` gives (after taking the wakeups that came and announcing, where
it has not since the last one); ``sleep_done`` takes the wakeups after the wait. Only the
compiled twin has the channel (pyverbs does not give its file descriptor): here
``sleep_prepare`` answers None and the idle replica side polls.
"""

from __future__ import annotations

import ctypes
import time

from bridge.errors import RdmaError
from bridge.ring.layout import (
    PUBLISH_AT,
    PUBLISH_BYTES,
    WAITING_AT,
    consumer_waiting,
    read_u64,
    set_waiting,
    write_publish,
)

try:  # pyverbs names its enums module differently from rdma-core 59 on
    import pyverbs.enums as e
except ImportError:  # pragma: no cover - newer rdma-core
    import pyverbs.libibverbs_enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

WRITE, READ, WRITE_IMM = 0, 1, 2  # the kinds of work request queued (bridge_verbs.h's BV_*)
CHAIN = 64  # work requests queued before they are posted together
HEADER_EVERY = 16  # a publish writes the ring's header this often (bridge_verbs.h's BV_HEADER_EVERY)
_OPCODES = {WRITE: e.IBV_WR_RDMA_WRITE, READ: e.IBV_WR_RDMA_READ, WRITE_IMM: e.IBV_WR_RDMA_WRITE_WITH_IMM}


class Domain:
    """The device named ``name``, opened, and a protection domain on it."""

    def __init__(self, name: str) -> None:
        try:
            self.ctx = Context(name=name)
            self.pd = PD(self.ctx)
        except PyverbsError as exc:
            raise RdmaError.call(f"open {name}", str(exc)) from exc

    def register(self, address: int, length: int, access: int) -> MR:
        """``length`` bytes at ``address`` (the caller's memory, kept alive by it) registered
        with ``access``: an MR (buf, length, lkey, rkey, close)."""
        try:
            return MR(self.pd, length, access, address=address)
        except PyverbsError as exc:
            raise RdmaError.call(f"register {length} bytes", str(exc)) from exc

    def close(self) -> None:
        self.pd.close()
        self.ctx.close()


class QueuePair:
    lane_path = None  # the compiled ship lane posts only on the compiled twin's path
    lane_sleeper = None  # ... and the compiled apply lane sleeps only through the compiled twin's
    wakeups = 0  # no completion channel through pyverbs: nothing wakes the replica side, it polls

    def __init__(self, domain: Domain, depth: int, inline_bytes: int = 256, wake_recvs: int = 0) -> None:
        self.cq = CQ(domain.ctx, depth, None, None, 0)
        self.depth = depth
        while True:
            cap = QPCap(max_send_wr=depth, max_recv_wr=max(wake_recvs, 1), max_send_sge=1, max_recv_sge=1,
                        max_inline_data=inline_bytes)
            try:
                self.qp = QP(domain.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap,
                                                   sq_sig_all=0))  # pyverbs signals every request unless told
                break
            except PyverbsError as exc:
                if inline_bytes == 0:
                    self.cq.close()
                    raise RdmaError.call("open a queue pair", str(exc)) from exc
                inline_bytes //= 4
        self.max_inline = self.qp.query(e.IBV_QP_CAP)[1].cap.max_inline_data
        self.max_msg = 1 << 30  # until ``connect`` reads the port's max_msg_sz
        self._ctx = domain.ctx
        self.local, self.lkey, self.remote, self.rkey = 0, 0, 0, 0
        self.view: memoryview | None = None  # the local buffer
        self._queued: list[list[int]] = []  # [kind, at, length, to]
        self._imm = 0
        self._outstanding = 0  # signaled work requests not yet completed
        self._unsignaled = 0  # posted since the last signaled one
        self._publishes = 0

    @property
    def qp_num(self) -> int:
        return self.qp.qp_num

    def connect(self, port: int, access: int, mtu: int, dest_qpn: int, rq_psn: int, sq_psn: int, dgid: bytes,
                sgid_index: int, traffic_class: int, sl: int, dlid: int, timeout: int, retry_cnt: int, rnr_retry: int,
                min_rnr_timer: int) -> None:
        """INIT, RTR, RTS towards the peer's queue pair: RoCE (``dlid`` 0), a global route to
        ``dgid`` from GID ``sgid_index``, packets marked ``traffic_class`` and ``sl``;
        InfiniBand, the peer's LID ``dlid``."""
        from pyverbs.addr import GID, AHAttr, GlobalRoute

        attr = QPAttr(port_num=port)
        attr.qp_access_flags = access
        attr.path_mtu = mtu
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = dest_qpn, rq_psn, sq_psn
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.min_rnr_timer = timeout, retry_cnt, rnr_retry, min_rnr_timer
        self.max_msg = min(self._ctx.query_port(port).max_msg_sz or 1 << 30, 1 << 30)
        if dlid:
            attr.ah_attr = AHAttr(port_num=port, dlid=dlid, sl=sl)
        else:
            route = GlobalRoute(dgid=GID(_gid_text(dgid)), sgid_index=sgid_index)
            route.hop_limit, route.traffic_class = 64, traffic_class
            attr.ah_attr = AHAttr(port_num=port, is_global=1, gr=route, sl=sl)
        try:
            self.qp.to_rts(attr)
        except PyverbsError as exc:
            raise RdmaError.call("move the queue pair to RTS", str(exc)) from exc

    def address(self) -> tuple[int, int, int, int]:
        """(traffic class, service level, source GID index, port) as the device holds them
        for this queue pair once connected (ibv_query_qp), -1 each where it cannot say."""
        try:
            ah = self.qp.query(e.IBV_QP_AV)[0].ah_attr
        except PyverbsError:
            return -1, -1, -1, -1
        return ah.traffic_class, ah.sl, ah.sgid_index, ah.port_num

    def bind(self, mr, remote: int, rkey: int, timeout_s: float = 0) -> None:
        """The local buffer (a registered region) and the remote one (its address and rkey)
        (``timeout_s``: the compiled twin's sleeper's; none here)."""
        self.local, self.lkey, self.remote, self.rkey = mr.buf, mr.lkey, remote, rkey
        self.view = memoryview((ctypes.c_ubyte * mr.length).from_address(mr.buf)).cast("B")

    # --- the primary side ---------------------------------------------------------------

    def place(self, at: int, length: int) -> None:
        """An RDMA WRITE of the mirror's ``length`` bytes at ``at``, queued."""
        self._queue(WRITE, at, length, at)

    def publish(self, write_seq: int, head: int, timeout_s: float) -> None:
        """Everything queued placed in the replica's ring when this returns; then the
        wakeup where the replica side sleeps."""
        self.post_publish(write_seq, head)
        self.wait(timeout_s)
        self.wake(write_seq)

    def post_publish(self, write_seq: int, head: int) -> None:
        """``publish``'s posting (the compiled twin: publish_post, bridge/transport/verbs_c.pxd):
        the frames queued posted with their last write signaled; the header stored, and
        written after them, unsignaled and inline, with every HEADER_EVERY-th publish
        (signaled, with every publish, where no frame was queued or the device writes
        nothing inline: its DMA read could see the next publish's header)."""
        write_publish(self.view, write_seq, head)
        self._publishes += 1
        if not self._queued or self.max_inline < PUBLISH_BYTES:
            self._queue(WRITE, PUBLISH_AT, PUBLISH_BYTES, PUBLISH_AT)  # write_seq and head, side by side
            self._post(True)
            return
        self._post(True)
        if self._publishes % HEADER_EVERY == 0:
            self._queue(WRITE, PUBLISH_AT, PUBLISH_BYTES, PUBLISH_AT)
            self._post(False)

    def wake(self, write_seq: int) -> None:
        """After a publish completed: the wakeup where the replica side said it sleeps (the
        word cleared: one wakeup per time it says so), a zero-length write with immediate data."""
        if consumer_waiting(self.view):
            set_waiting(self.view, False)
            self._imm = write_seq & 0xFFFFFFFF
            self._queue(WRITE_IMM, WAITING_AT, 0, WAITING_AT)
            self._post(False)

    def fence(self, timeout_s: float) -> None:
        """Everything queued and posted so far placed, the header last (exact): signaled."""
        self._queue(WRITE, PUBLISH_AT, PUBLISH_BYTES, PUBLISH_AT)
        self._post(True)
        self.wait(timeout_s)

    def read_u64(self, at: int, to: int, timeout_s: float) -> int:
        """The remote buffer's 8 bytes at ``to``, by an RDMA READ into the local one at ``at``."""
        self._queue(READ, at, 8, to)
        self._post(True)
        self.wait(timeout_s)
        return read_u64(self.view, at)

    # --- the replica side ---------------------------------------------------------------

    def sleep_prepare(self) -> None:
        """No completion channel's fd through pyverbs: this queue pair cannot sleep (None)."""
        return None

    def sleep_done(self) -> None:
        """Nothing was taken: nothing woke it."""

    sleep_failure = None  # it never sleeps, so no receive of its can complete in error
    soft = True  # its waits give the CPU (and the interpreter lock) away on every empty poll, device or not

    # --- work requests ------------------------------------------------------------------

    def _queue(self, kind: int, at: int, length: int, to: int) -> None:
        """One work request queued: merged into the last where it continues it in both buffers
        and the two stay within the port's max_msg_sz; split where it is longer."""
        while length > self.max_msg:
            self._queue(kind, at, self.max_msg, to)
            at, to, length = at + self.max_msg, to + self.max_msg, length - self.max_msg
        last = self._queued[-1] if self._queued else None
        if kind == WRITE and last is not None and last[0] == WRITE and last[1] + last[2] == at and \
                last[3] + last[2] == to and last[2] + length <= self.max_msg:
            last[2] += length
            return
        if len(self._queued) == CHAIN:
            self._post(False)
        self._queued.append([kind, at, length, to])

    def _post(self, signaled: bool) -> None:
        queued, self._queued = self._queued, []
        if not queued:
            return
        if self._unsignaled + len(queued) >= self.depth // 2:
            signaled = True  # keep the send queue from filling with requests never reaped
        for i, (kind, at, length, to) in enumerate(queued):
            flags = e.IBV_SEND_SIGNALED if signaled and i == len(queued) - 1 else 0
            if kind != READ and length <= self.max_inline:
                flags |= e.IBV_SEND_INLINE
            wr = SendWR(opcode=_OPCODES[kind], num_sge=1, sg=[SGE(self.local + at, length, self.lkey)],
                        send_flags=flags)
            wr.set_wr_rdma(self.rkey, self.remote + to)
            if kind == WRITE_IMM:
                wr.imm_data = self._imm
            try:
                self.qp.post_send(wr)
            except PyverbsError as exc:
                raise RdmaError.call("post_send", str(exc)) from exc
        if signaled:
            self._outstanding += 1
            self._unsignaled = 0
        else:
            self._unsignaled += len(queued)

    def reap(self) -> bool:
        """One poll, without waiting: True once every signaled work request completed."""
        if self._outstanding:
            n, wcs = self.cq.poll(num_entries=min(self._outstanding, 16))
            for wc in wcs[:n]:
                if wc.status != e.IBV_WC_SUCCESS:
                    self._outstanding = 0
                    raise RdmaError.completion(wc.status, wc.opcode)
            self._outstanding -= n
        return self._outstanding == 0

    def wait(self, timeout_s: float) -> None:
        """Poll until every signaled work request completed (a spin that yields, the clock
        read every 1024 empty polls, as the compiled twin does)."""
        spins, deadline = 0, None
        while not self.reap():
            spins += 1
            time.sleep(0)  # the CPU, and the interpreter lock, for others meanwhile
            if spins % 1024 == 0:
                now = time.monotonic()
                deadline = deadline or now + timeout_s
                if now >= deadline:
                    raise RdmaError.timed_out(timeout_s)

    def break_link(self) -> None:
        """The queue pair to the error state (a fault a test injects): its requests fail from now on."""
        attr = QPAttr()
        attr.qp_state = e.IBV_QPS_ERR
        self.qp.modify(attr, e.IBV_QP_STATE)

    def close(self) -> None:
        if self.view is not None:
            self.view.release()
            self.view = None
        self.qp.close()
        self.cq.close()


def _gid_text(raw: bytes) -> str:
    """16 bytes of a GID as pyverbs writes it (eight groups of four hex digits)."""
    h = raw.hex()
    return ":".join(h[i:i + 4] for i in range(0, 32, 4))
