# The rings one run of the compiled ship lane (bridge/source/_ship.pyx) feeds, and what it
# does to each in C: the placement's bytes copied (shm) or their writes queued (rdma), the
# head advanced, the header published (shm: stores and the doorbell; rdma: the completions
# settled). The twin: bridge.source.ship.ShipLane's _copy, _publish, _store_publish and
# _settle_writes.
from libc.errno cimport EAGAIN, ETIMEDOUT, errno
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
from posix.unistd cimport write

from bridge.transport.verbs_c cimport (BV_PENDING, BV_WRITE, bv_path, bv_queue, bv_reap, bv_relax, publish_post,
                                       wake_peer)
from bridge.wire.layouts cimport DATA_OFFSET, HEAD_AT, WAITING_AT, WRITE_SEQ_AT
from bridge.wire.native_c cimport CLOCK_MONOTONIC, fence_full, fence_release, now_ns, rd32, wr32, wr64


cdef enum:
    WAKE_GRACE_NS = 1000000  # rings_settle: how long a sleeping further member's completion is waited for


cdef struct Ring:
    # a ring the run feeds (0: the first; then each further one, fan-out): its producer's
    # mirror, the replica's shared ring (shm; over tcp its link carries the frames; over rdma
    # the transport's registered mirror, which its queue pair writes there) and where its
    # next frame goes
    uint8_t *mirror  # the mirror's data area
    uint8_t *shared  # the shared ring's region (shm), or the registered mirror's (rdma)
    bv_path *verbs  # rdma: the queue pair's path (bridge/transport/bridge_verbs.h), else NULL
    Py_ssize_t size, head, room
    uint64_t seq
    uint32_t epoch
    int bell  # its doorbell (shm), or -1
    int dead  # a further ring whose doorbell or connection failed: fed no more this run
    int fail  # ... why (an errno, a link's FAIL_*, or BV_FAILED: an error completion)
    int owes  # a further ring had no space for a transaction this run (handed back in ``owed``)
    int pending  # rdma: its last publish's completion not seen yet (its replica side may not hold it)
    int late  # rdma: a sleeping replica side's completion outlasted WAKE_GRACE_NS in this run: not waited for again


cdef inline int ring_copy(Ring *ring, Py_ssize_t used, bint wrapped) noexcept nogil:
    """shm: the ``used`` bytes a placement took from the ring's head, from the mirror into
    the shared ring (the ring's end first where it ``wrapped``); rdma: into the registered
    mirror (nothing to copy where the producer frames there itself), and their RDMA WRITEs
    queued: 0, or the errno of posting a full chain."""
    cdef Py_ssize_t head = ring.head, first = ring.size - head if wrapped else used
    cdef int err = 0
    if ring.shared + DATA_OFFSET != ring.mirror:  # rdma: the producer frames into the registered mirror itself
        memcpy(ring.shared + DATA_OFFSET + head, ring.mirror + head, first)
        if wrapped:
            memcpy(ring.shared + DATA_OFFSET, ring.mirror, used - first)
    if ring.verbs != NULL:
        err = bv_queue(ring.verbs, BV_WRITE, DATA_OFFSET + head, first, DATA_OFFSET + head)
        if err == 0 and wrapped:
            err = bv_queue(ring.verbs, BV_WRITE, DATA_OFFSET, used - first, DATA_OFFSET)
    return err


cdef inline void ring_advance(Ring *ring, Py_ssize_t used) noexcept nogil:
    ring.head = (ring.head + used) % ring.size  # past the gap too, if it wrapped
    ring.room -= used
    ring.seq += 1


cdef inline int ring_store_publish(Ring *ring) noexcept nogil:
    """shm: the ring's head, then (release) the write_seq that publishes its frames, then
    (the seq out before the waiting flag is read; the consumer: the other way round) the
    doorbell when the replica side sleeps on it: 0, or the errno of the doorbell's write."""
    wr32(ring.shared + HEAD_AT, <uint32_t>ring.head)
    fence_release()
    wr64(ring.shared + WRITE_SEQ_AT, ring.seq - 1)
    fence_full()
    if ring.bell >= 0 and rd32(ring.shared + WAITING_AT):
        if write(ring.bell, b"\x01", 1) < 0 and errno != EAGAIN:
            return errno
    return 0


cdef inline int rings_settle(Ring *rings, int n_rings, int need, uint64_t timeout_ns) noexcept nogil:
    """rdma: the rings' completions polled in turn (a spin; the caller holds no GIL) until the
    first ring and ``need`` rings in all hold what they published (a semi-sync ACK's
    quorum; else the first alone, and then every further ring whose replica side sleeps,
    for up to WAKE_GRACE_NS after the first, so that each sleeping member is woken in this
    placement as its completion arrives, not at the next one; a member whose completion
    outlasts it, a dead one, is not waited for again in this run, and an ACK's quorum
    never waits for it): 0, or the first ring's failure; a further ring that fails is
    dead, one that is slow stays pending."""
    cdef int k, err, held, live, asleep, first = 0
    cdef unsigned spins = 0
    cdef uint64_t now, deadline = now_ns(CLOCK_MONOTONIC) + timeout_ns, grace_until = 0
    while True:
        held = live = asleep = 0
        for k in range(n_rings):
            if rings[k].dead:
                continue
            live += 1
            if rings[k].pending:
                err = bv_reap(rings[k].verbs)
                if err == 0:
                    rings[k].pending = 0
                    err = wake_peer(rings[k].verbs, rings[k].seq - 1)
                if err == BV_PENDING:
                    if need <= 1 and not rings[k].late and rd32(<uint8_t *>rings[k].verbs.local + WAITING_AT):
                        asleep += 1
                    continue
                if err:
                    rings[k].dead, rings[k].fail = k > 0, err
                    if k == 0:
                        first = err
                    continue
            held += 1
        if first:
            break
        if not rings[0].pending and (held >= need or live < need):  # held, or a quorum no longer possible
            if asleep == 0:
                break
            now = now_ns(CLOCK_MONOTONIC)
            if grace_until == 0:
                grace_until = now + WAKE_GRACE_NS
            elif now >= grace_until:
                for k in range(1, n_rings):
                    if rings[k].pending:
                        rings[k].late = 1  # slow or dead: woken at a later publish, not waited for again
                break
        bv_relax(rings[0].verbs, &spins)
        if (spins & 1023) == 0 and now_ns(CLOCK_MONOTONIC) >= deadline:
            if rings[0].pending:
                first = rings[0].fail = ETIMEDOUT
            break
    return first


cdef inline int rings_publish(Ring *rings, int n_rings, int need, uint64_t timeout_ns) noexcept nogil:
    """shm: every live ring published in its shared header; rdma: its header's write posted
    after its frames', then the completions settled (``rings_settle``) until ``need`` rings
    (the first among them) hold what was published: 0, or the first ring's failure (the
    errno of its doorbell or its post, BV_FAILED: an error completion; its ``fail`` too).
    A further ring that fails is dead."""
    cdef int k, err, first = 0
    for k in range(n_rings):
        if rings[k].dead:
            continue
        if rings[k].verbs != NULL:
            err = publish_post(rings[k].verbs, rings[k].seq - 1, <uint32_t>rings[k].head)
            rings[k].pending = 1
        else:
            err = ring_store_publish(&rings[k])
        if err:
            rings[k].dead, rings[k].fail = k > 0, err
            if k == 0:
                first = err
    if first == 0 and rings[0].verbs != NULL:
        first = rings_settle(rings, n_rings, need, timeout_ns)
    return first
