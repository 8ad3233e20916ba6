# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``bridge.transport.verbs`` (read its docstring): the device's protection
domain, memory regions, and RC queue pairs with their completion queues, opened through
libibverbs itself (Debian's pyverbs gives no C pointer of its objects), with the same
methods; work requests go through bridge_verbs.h and verbs_c.pxd (libibverbs' own calls,
no Python object per request), and ``lane_path`` lets the compiled ship lane post and poll
on a queue pair directly. The replica side's queue pair can sleep: its receives complete
on a completion channel whose file descriptor the idle replica side waits on
(``sleep_prepare``, ``sleep_done``; the compiled apply lane through ``lane_sleeper``).
"""

from libc.stdint cimport uint8_t, uint32_t, uint64_t, uintptr_t
from libc.errno cimport ENOMEM, ETIMEDOUT, errno
from libc.string cimport memcpy

from bridge.transport import verbs as _twin
from bridge.errors import RdmaError

if (BV_WRITE, BV_READ, BV_WRITE_IMM) != (_twin.WRITE, _twin.READ, _twin.WRITE_IMM):
    raise ImportError("bridge.transport._verbs was built from kinds its twin no longer has; rebuild it")
WRITE, READ, WRITE_IMM = _twin.WRITE, _twin.READ, _twin.WRITE_IMM

from bridge.transport.verbs_c cimport (BV_FAILED, BV_PENDING, BV_READ, BV_WRITE, BV_WRITE_IMM, bv_path, bv_post,
                                       bv_queue, bv_reap, bv_sleep_done, bv_sleep_prepare, bv_sleeper,
                                       bv_sleeper_init, bv_sleeper_shut, bv_wait, publish_post, wake_peer)
from bridge.wire.layouts cimport PUBLISH_BYTES, SCRATCH_AT, WAITING_AT, WRITE_SEQ_AT
from bridge.wire.native_c cimport rd64, wr32


cdef extern from "<fcntl.h>" nogil:
    int fcntl(int fd, int cmd, ...)
    enum: F_GETFL, F_SETFL, O_NONBLOCK


cdef extern from "bridge_verbs_setup.h":
    struct ibv_context
    struct ibv_mr:
        void *addr
        size_t length
        uint32_t lkey, rkey
    ibv_mr *ibv_reg_mr(ibv_pd *pd, void *addr, size_t length, int access) nogil
    int ibv_dereg_mr(ibv_mr *mr) nogil
    int ibv_dealloc_pd(ibv_pd *pd) nogil
    int ibv_close_device(ibv_context *ctx) nogil
    int bv_domain_open(const char *name, ibv_context **ctx, ibv_pd **pd) nogil
    struct ibv_cq
    struct ibv_qp
    struct ibv_comp_channel:
        int fd
    struct ibv_pd:
        ibv_context *context
    ctypedef struct bv_wake:
        ibv_comp_channel *channel
        ibv_cq *cq
        int recvs
    int bv_open(bv_path *p, bv_wake *wake, ibv_pd *pd, int depth, int inline_bytes) nogil
    int bv_connect(bv_path *p, int port, int access, int mtu, uint32_t dest_qpn, uint32_t rq_psn, uint32_t sq_psn,
                   const uint8_t *dgid, int sgid_index, int traffic_class, int sl, int dlid, int timeout,
                   int retry_cnt, int rnr_retry, int min_rnr_timer) nogil
    uint32_t bv_qp_num(const bv_path *p) nogil
    void bv_address(const bv_path *p, int *traffic_class, int *sl, int *sgid_index, int *port) nogil
    int bv_break(bv_path *p) nogil
    void bv_close(bv_path *p) nogil
    int bv_wake_open(bv_wake *w, ibv_context *ctx, int recvs) nogil
    int bv_wake_recv(ibv_qp *qp, int n) nogil
    void bv_wake_close(bv_wake *w) nogil

    struct ibv_wc:
        int status
    int ibv_poll_cq(ibv_cq *cq, int n, ibv_wc *wc) nogil
    int ibv_req_notify_cq(ibv_cq *cq, int solicited_only) nogil
    int ibv_get_cq_event(ibv_comp_channel *channel, ibv_cq **cq, void **context) nogil
    void ibv_ack_cq_events(ibv_cq *cq, unsigned int n) nogil


cdef class Domain:
    """The device named ``name``, opened, and a protection domain on it."""
    cdef ibv_context *ctx
    cdef ibv_pd *pd

    def __init__(self, str name):
        err = bv_domain_open(name.encode(), &self.ctx, &self.pd)
        if err:
            raise RdmaError.call(f"open {name}", err)

    def register(self, uintptr_t address, size_t length, int access):
        return Region(self, address, length, access)

    def close(self):
        if self.pd != NULL:
            ibv_dealloc_pd(self.pd)
        if self.ctx != NULL:
            ibv_close_device(self.ctx)
        self.pd, self.ctx = NULL, NULL

    def __dealloc__(self):
        self.close()


cdef class Region:
    """``length`` bytes at ``address`` (the caller's memory, kept alive by it) registered
    in the domain, with ``access``."""
    cdef ibv_mr *mr
    cdef Domain domain

    def __init__(self, Domain domain, uintptr_t address, size_t length, int access):
        self.domain = domain
        self.mr = ibv_reg_mr(domain.pd, <void *>address, length, access)
        if self.mr == NULL:
            raise RdmaError.call(f"register {length} bytes", errno if errno else ENOMEM)

    @property
    def buf(self):
        return <uintptr_t>self.mr.addr

    @property
    def length(self):
        return self.mr.length

    @property
    def lkey(self):
        return self.mr.lkey

    @property
    def rkey(self):
        return self.mr.rkey

    def close(self):
        if self.mr != NULL:
            ibv_dereg_mr(self.mr)
            self.mr = NULL

    def __dealloc__(self):
        self.close()


cdef struct Sleep:
    # what the sleeper's calls act on: the queue pair's path and its completion channel
    bv_path *path
    bv_wake *chan
    uint64_t timeout_ns  # an announcement's completion waited for at most this long
    int status  # the first receive completion in error's (0: none)


cdef int _announce(void *owner) noexcept nogil:
    """The replica side sleeps: its ring's waiting word (in the registered ring, the path's
    local buffer) written into the primary side's mirror, then an 8-byte RDMA READ of that
    mirror (into the ring header's scratch bytes), both completions waited for. A write's
    completion says the peer's NIC has it, not that the peer's CPU can see it; a READ
    behind it on the same queue pair is answered only once the write is placed (an RC
    responder carries out a queue pair's requests in order), so a publish the primary side
    completes from now on finds the word: 0 or the error."""
    cdef Sleep *s = <Sleep *>owner
    cdef int err
    wr32(<uint8_t *>s.path.local + WAITING_AT, 1)
    err = bv_queue(s.path, BV_WRITE, WAITING_AT, 4, WAITING_AT)
    if err == 0:
        err = bv_queue(s.path, BV_READ, SCRATCH_AT, 8, WAITING_AT)
    if err == 0:
        err = bv_post(s.path, 1)
    return err if err else bv_wait(s.path, s.timeout_ns)


cdef int _taken(void *owner) noexcept nogil:
    """The wakeups that arrived: the channel's events taken and acknowledged, the receives
    they consumed posted again, the queue armed for the next: how many, or -1."""
    cdef Sleep *s = <Sleep *>owner
    cdef ibv_cq *cq
    cdef void *ctx
    cdef ibv_wc wc[16]
    cdef int events = 0, consumed = 0, n, i
    while ibv_get_cq_event(s.chan.channel, &cq, &ctx) == 0:
        events += 1
    if events:
        ibv_ack_cq_events(s.chan.cq, events)
    while True:
        n = ibv_poll_cq(s.chan.cq, 16, wc)
        if n <= 0:
            break
        for i in range(n):
            if wc[i].status != 0 and s.status == 0:  # flushed, or worse: the queue pair is in the error state
                s.status = wc[i].status
        consumed += n
    if s.status:
        return -1  # no receive posted again: its session ends (RdmaRingHost.sleep)
    if events == 0 and consumed == 0:
        return 0  # still armed
    if consumed and bv_wake_recv(<ibv_qp *>s.path.qp, consumed) != 0:
        return -1
    return -1 if ibv_req_notify_cq(s.chan.cq, 0) else consumed


cdef class QueuePair:
    cdef bv_path path
    cdef bv_wake chan  # the replica side's completion channel (none on the primary side)
    cdef Sleep sleep  # ... and what its sleeper acts on
    cdef bv_sleeper sleeper  # the replica side's sleep (bridge_verbs.h): open once bound
    cdef Domain domain  # kept open while the queue pair lives

    def __cinit__(self):
        self.sleep.path, self.sleep.chan = &self.path, &self.chan
        bv_sleeper_init(&self.sleeper, &self.sleep, _announce, _taken)

    def __init__(self, Domain domain, int depth, int inline_bytes=256, int wake_recvs=0):
        cdef ibv_pd *raw = domain.pd
        cdef int err
        self.domain = domain
        if wake_recvs > 0:
            err = bv_wake_open(&self.chan, raw.context, wake_recvs)
            if err:
                raise RdmaError.call("open a completion channel", err)
            fcntl(self.chan.channel.fd, F_SETFL, fcntl(self.chan.channel.fd, F_GETFL) | O_NONBLOCK)
        err = bv_open(&self.path, &self.chan, raw, depth, inline_bytes)
        if err:
            bv_wake_close(&self.chan)
            raise RdmaError.call("open a queue pair", err)

    @property
    def qp_num(self):
        return bv_qp_num(&self.path)

    def address(self):
        """(traffic class, service level, source GID index, port) as the device holds them for
        this queue pair once connected (ibv_query_qp), -1 each where it cannot say."""
        cdef int tc, sl, sgid, port
        bv_address(&self.path, &tc, &sl, &sgid, &port)
        return tc, sl, sgid, port

    @property
    def max_inline(self):
        return self.path.max_inline

    @max_inline.setter
    def max_inline(self, uint32_t n):
        """At most ``n`` bytes inline from now on (never more than the device gave)."""
        self.path.max_inline = min(n, self.path.max_inline)

    @property
    def soft(self):
        """A software device (Soft-RoCE, soft-iWARP): its completions come from kernel tasks on
        these CPUs, so a spin for one yields the CPU now and then; a NIC's spin never does."""
        return bool(self.path.soft)

    @soft.setter
    def soft(self, bint value):
        self.path.soft = value

    @property
    def max_msg(self):
        """The longest write it posts (its port's max_msg_sz, read at ``connect``)."""
        return self.path.max_msg

    @max_msg.setter
    def max_msg(self, uint32_t n):
        """Lowered only (a test holds writes to a small size as a port with a small max_msg_sz would)."""
        self.path.max_msg = max(1, min(n, self.path.max_msg))

    @property
    def lane_path(self):
        """The address of the path the compiled ship lane posts and polls on."""
        return <uintptr_t>&self.path

    @property
    def lane_sleeper(self):
        """The address of the sleeper the compiled apply lane sleeps through (None where it cannot sleep)."""
        return <uintptr_t>&self.sleeper if self.sleeper.open else None

    @property
    def wakeups(self):
        return self.sleeper.wakeups

    def connect(self, int port, int access, int mtu, uint32_t dest_qpn, uint32_t rq_psn, uint32_t sq_psn, bytes dgid,
                int sgid_index, int traffic_class, int sl, int dlid, int timeout, int retry_cnt, int rnr_retry,
                int min_rnr_timer):
        cdef uint8_t gid[16]
        if len(dgid) != 16:
            raise ValueError(f"rdma transport: a GID of {len(dgid)} bytes")
        memcpy(gid, <const char *>dgid, 16)
        err = bv_connect(&self.path, port, access, mtu, dest_qpn, rq_psn, sq_psn, gid, sgid_index, traffic_class, sl,
                         dlid, timeout, retry_cnt, rnr_retry, min_rnr_timer)
        if err:
            raise RdmaError.call("move the queue pair to RTS", err)
        if self.chan.cq != NULL:  # the receives a wakeup consumes (a queue pair takes them from INIT on), armed
            err = bv_wake_recv(<ibv_qp *>self.path.qp, self.chan.recvs)
            if err == 0:
                err = ibv_req_notify_cq(self.chan.cq, 0)
            self._check(err, "post receives")

    def bind(self, mr, uint64_t remote, uint32_t rkey, double timeout_s=0):
        """The local buffer (a registered region) and the remote one (its address and rkey);
        a connected replica side's queue pair may sleep from now on (``timeout_s``: an
        announcement's completion waited for at most that long)."""
        self.path.local, self.path.lkey, self.path.remote, self.path.rkey = mr.buf, mr.lkey, remote, rkey
        if self.chan.channel != NULL and self.path.qp != NULL:
            self.sleep.timeout_ns = <uint64_t>(timeout_s * 1e9)
            self.sleeper.fd, self.sleeper.open = self.chan.channel.fd, 1

    # --- the primary side ---------------------------------------------------------------

    def place(self, uint64_t at, uint32_t length):
        self._check(bv_queue(&self.path, BV_WRITE, at, length, at), "post_send")

    def publish(self, uint64_t write_seq, uint32_t head, double timeout_s):
        self.post_publish(write_seq, head)
        self.wait(timeout_s)
        self.wake(write_seq)

    def post_publish(self, uint64_t write_seq, uint32_t head):
        self._check(publish_post(&self.path, write_seq, head), "post_send")

    def reap(self):
        cdef int err = bv_reap(&self.path)
        if err == BV_PENDING:
            return False
        if err == BV_FAILED:
            raise RdmaError.completion(self.path.status, self.path.opcode)
        self._check(err, "poll the completion queue")
        return True

    def wake(self, uint64_t write_seq):
        self._check(wake_peer(&self.path, write_seq), "post_send")

    def fence(self, double timeout_s):
        """Everything posted placed, the header last (its write_seq and head exact)."""
        self._signaled(BV_WRITE, WRITE_SEQ_AT, PUBLISH_BYTES, WRITE_SEQ_AT, timeout_s)

    def read_u64(self, uint64_t at, uint64_t to, double timeout_s):
        self._signaled(BV_READ, at, 8, to, timeout_s)
        return rd64(<uint8_t *>self.path.local + at)

    # --- the replica side ---------------------------------------------------------------

    def sleep_prepare(self):
        """Before a sleep: the wakeups that came taken, the waiting word announced where it is
        not up: the file descriptor to wait on, or None (it cannot sleep: poll)."""
        cdef int fd
        with nogil:
            fd = bv_sleep_prepare(&self.sleeper)
        return fd if fd >= 0 else None

    @property
    def sleep_failure(self):
        """Why this queue pair can sleep no more (a receive completed in error: the queue pair
        is in the error state), or None."""
        if not self.sleeper.failed:
            return None
        return str(RdmaError.completion(self.sleep.status, 129))  # IBV_WC_RECV_RDMA_WITH_IMM: a wakeup's receive

    def sleep_done(self):
        """After a sleep: the wakeups that woke it taken."""
        with nogil:
            bv_sleep_done(&self.sleeper)

    # --- work requests ------------------------------------------------------------------

    cdef int _signaled(self, int kind, uint64_t at, uint32_t length, uint64_t to, double timeout_s) except -1:
        """One request (after what is queued), posted signaled, and its completion waited for."""
        self._check(bv_queue(&self.path, kind, at, length, to), "post_send")
        self._check(bv_post(&self.path, 1), "post_send")
        self.wait(timeout_s)
        return 0

    cdef int _check(self, int err, str what) except -1:
        if err:
            raise RdmaError.call(what, err)
        return 0

    def wait(self, double timeout_s):
        cdef int err
        cdef uint64_t timeout_ns = <uint64_t>(timeout_s * 1e9)
        with nogil:
            err = bv_wait(&self.path, timeout_ns)
        if err == BV_FAILED:
            raise RdmaError.completion(self.path.status, self.path.opcode)
        if err == ETIMEDOUT:
            raise RdmaError.timed_out(timeout_s)
        self._check(err, "poll the completion queue")

    def break_link(self):
        """The queue pair to the error state (a fault a test injects): its requests fail from now on."""
        err = bv_break(&self.path)
        if err:
            raise RdmaError.call("move the queue pair to ERR", err)

    def close(self):
        with nogil:
            bv_sleeper_shut(&self.sleeper)  # after a sleeper's call under way
        bv_close(&self.path)
        bv_wake_close(&self.chan)

    def __dealloc__(self):
        self.close()
