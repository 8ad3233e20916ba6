# The rdma transport's work requests in C (bridge/transport/bridge_verbs.h), declared once
# for Cython: a queue pair's path to the replica's ring, queued writes merged and posted as
# one chain, completions polled; the replica side's sleep on its queue pair. The ship lane
# (bridge/source/_ship.pyx) posts and polls through it, and the apply lane sleeps through
# it, without linking libibverbs; the compiled queue pair (_verbs.pyx) opens it.
from libc.errno cimport ETIMEDOUT
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from bridge.wire.layouts cimport HEAD_AT, PUBLISH_BYTES, WAITING_AT, WRITE_SEQ_AT
from bridge.wire.native_c cimport rd32, wr32, wr64


cdef extern from "bridge_verbs.h" nogil:
    enum: BRIDGE_HAVE_VERBS  # 0 where verbs.h was missing at build time: every call answers ENOSYS
    enum:
        BV_CHAIN
        BV_WRITE
        BV_READ
        BV_WRITE_IMM
        BV_FAILED
        BV_PENDING
        BV_HEADER_EVERY

    ctypedef struct bv_path:
        void *qp
        void *cq
        uint64_t local, remote
        uint32_t lkey, rkey, max_inline, max_msg, depth
        int soft
        int outstanding, unsignaled, status, opcode, queued
        uint32_t imm, publishes

    ctypedef struct bv_sleeper:
        int open, fd, said, failed
        uint64_t wakeups

    void bv_sleeper_init(bv_sleeper *s, void *owner, int (*announce)(void *) noexcept nogil,
                         int (*taken)(void *) noexcept nogil) noexcept
    int bv_sleep_prepare(bv_sleeper *s) noexcept
    void bv_sleep_done(bv_sleeper *s) noexcept
    void bv_sleeper_shut(bv_sleeper *s) noexcept

    int bv_post(bv_path *p, int signaled) noexcept
    int bv_queue(bv_path *p, int kind, uint64_t at, uint32_t length, uint64_t to) noexcept
    int bv_reap(bv_path *p) noexcept
    void bv_relax(const bv_path *p, unsigned *spins) noexcept
    int bv_wait(bv_path *p, uint64_t timeout_ns) noexcept


# --- what a queue pair does with the ring's header (both the compiled queue pair and the
# compiled ship lane; the twins: bridge.transport.verbs.QueuePair) -----------------------

cdef inline int publish_post(bv_path *p, uint64_t write_seq, uint32_t head) noexcept nogil:
    """A placement is one write: the frames queued since the last publish, posted as one
    chain with its last write signaled (its completion: the frames are in the replica's
    ring, where its consumer takes each by its own seq and crc). The header (write_seq and
    head, stored in the mirror: the path's local buffer) is a hint for the replica side's
    metrics and its corruption check: written after the frames, unsignaled and inline,
    with every BV_HEADER_EVERY-th publish and a ``fence``. Every work request costs about
    a round trip on Soft-RoCE, and a second one per placement doubled its latency. Where
    nothing was queued, or the device writes nothing inline (the NIC would read the
    mirror's header by DMA after this returns, maybe once the next publish changed it:
    write_seq ahead of its frames), the header goes after the frames, signaled, with
    every publish. 0 or an errno."""
    cdef uint8_t *mirror = <uint8_t *>p.local
    cdef int err
    wr64(mirror + WRITE_SEQ_AT, write_seq)
    wr32(mirror + HEAD_AT, head)
    p.publishes += 1
    if p.queued == 0 or p.max_inline < PUBLISH_BYTES:
        err = bv_queue(p, BV_WRITE, WRITE_SEQ_AT, PUBLISH_BYTES, WRITE_SEQ_AT)
        return err if err else bv_post(p, 1)
    err = bv_post(p, 1)
    if err or p.publishes % BV_HEADER_EVERY:
        return err
    err = bv_queue(p, BV_WRITE, WRITE_SEQ_AT, PUBLISH_BYTES, WRITE_SEQ_AT)
    return err if err else bv_post(p, 0)


cdef inline int wake_peer(bv_path *p, uint64_t write_seq) noexcept nogil:
    """After a publish completed: where the replica side wrote its waiting word into the
    mirror, the word cleared (one wakeup per time it says it sleeps: it cannot run out of
    posted receives) and a zero-length write with immediate data (unsignaled), which wakes
    it: 0 or an errno."""
    cdef int err
    if rd32(<uint8_t *>p.local + WAITING_AT) == 0:
        return 0
    wr32(<uint8_t *>p.local + WAITING_AT, 0)
    p.imm = <uint32_t>write_seq
    err = bv_queue(p, BV_WRITE_IMM, WAITING_AT, 0, WAITING_AT)
    return err if err else bv_post(p, 0)


cdef inline object verbs_error(bv_path *path, int err, double timeout_s):
    """What a failed placement on ``path`` raises: an error completion, no completion
    within ``timeout_s``, or a refused post (the errno)."""
    from bridge.errors import RdmaError
    if err == BV_FAILED:
        return RdmaError.completion(path.status, path.opcode)
    if err == ETIMEDOUT:
        return RdmaError.timed_out(timeout_s)
    return RdmaError.call("post_send", err)
