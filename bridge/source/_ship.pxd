# The compiled ship lane (bridge/source/_ship.pyx; its twin is bridge.source.ship): the
# rings one run feeds and the lane's state, declared for Cython.
from cpython.buffer cimport Py_buffer
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from bridge.source._dumpreader cimport DumpReader as Reader
from bridge.transport._sender cimport Link
from bridge.source.rings_c cimport Ring
from bridge.wire._frames cimport Scanned


cdef enum:
    C_RUN_TXNS = 64  # bridge.source.ship.RUN_TXNS
    C_BATCHES = 256  # bridge.source.ship.BATCHES
    C_IDLE = 0
    C_NOT_MINE = 1
    C_MAX_RINGS = 7  # bridge.source.ship.MAX_RINGS


cdef class ShipLane:
    cdef readonly Reader reader
    cdef readonly object producer, remote, heartbeat, counts, rings
    cdef readonly object verbs  # rdma: the first ring's queue pair (bridge.transport._verbs), else None
    cdef public object owed, gone
    cdef readonly int doorbell
    cdef readonly Py_ssize_t max_bytes
    cdef bytes hb_schema, hb_table
    cdef readonly object sock
    cdef int n_links, send_timeout_ms
    cdef Link links[C_MAX_RINGS + 1]  # tcp: the first ring's connection, then each further ring's
    cdef public int seq_id, why, ack_error
    cdef public Py_ssize_t frames, heartbeats, commit_position, acks
    cdef public object gtid
    cdef public object asked  # (seq, ACK position, monotonic ns) handed back unacknowledged, or None
    cdef public int quorum  # fan-out semi-sync: rings that must hold a transaction for its ACK
    # over the lane's life: wakeups (the dump readable, an answer in) that waited over 1 ms for
    # the interpreter lock before the lane could go on, and the longest such wait
    cdef public Py_ssize_t gil_waits
    cdef public unsigned long long gil_wait_max_ns
    cdef uint32_t batch_us[C_BATCHES]  # per publish: its first transaction's time from placed to published
    cdef uint32_t batch_n[C_BATCHES]  # ... and how many it published
    cdef int batches
    cdef uint32_t ack_us[C_BATCHES]  # per ACK sent: its transaction's time from placed to the ACK out
    cdef uint32_t ack_n[C_BATCHES]  # ... and how many ACKs (1, the last one more where a run sent over C_BATCHES)
    cdef int ack_kept

    cdef Link *_link(self, int k) except NULL
    cdef int _open(self, Ring *ring, int k, Py_buffer *mirror, Py_buffer *shared) except -1
    cdef bint _place(self, Ring *rings, int n_rings, const uint8_t *b, Scanned *s, uint8_t sid, list entries) except -1
    cdef bint _place_in(self, Ring *ring, int k, const uint8_t *b, Scanned *s, list placed) except -1
    cdef int _send_publish(self, Ring *rings, int n_rings, bint answer) except? -3
    cdef int _store_publishes(self, Ring *rings, int n_rings, int need)
    cdef void _count(self, Py_ssize_t n, Py_ssize_t heartbeats)
    cdef void _note_gone(self, Ring *rings, int n_rings)
    cdef bint _settle_ack(self, Ring *rings, int n_rings, long long ack_pos, uint64_t ack_ns, uint64_t deadline,
                          long long ack_wait_us, bytes ack_file) except -1
    cdef int _await_quorum(self, uint64_t until_ns, const uint64_t *want, const int *holding, int n_holding,
                           Ring *rings) noexcept nogil
    cdef int _acknowledge(self, uint64_t position, bytes log_file)
    cdef bint _wait_dump(self, Reader rd, uint64_t deadline) except -1
    cdef void _gil_waited(self, uint64_t woke_ns) noexcept
