# The channel's position as the compiled apply lane writes it (bridge/apply/lane/_position.pyx):
# the MariaDB GTID set it carries, one (domain, server, seq) per domain, and the
# UPDATE_ROWS event of rdma_bridge.bridge_meta that records it with the applied seq.
# The twin is bridge.apply.lane (its GTID parts and position_events).
from libc.stdint cimport uint8_t, uint32_t, uint64_t


cdef enum:
    DOMAINS = 64  # bridge.apply.lane.MAX_DOMAINS
    POSITION_MAX = 4096  # the position's UPDATE event, its GTID set at DOMAINS domains included


cdef struct Domains:
    uint32_t dom[DOMAINS]  # ascending
    uint32_t srv[DOMAINS]
    uint64_t dseq[DOMAINS]
    int n


cdef struct EventForm:
    # what every position event of a lane shares: the channel's row key (VARCHAR, its length
    # prefix included), the TIMESTAMP's fractional digits, the stream's checksum, server id
    # and row event type (UPDATE_ROWS v1, or v2 on MySQL)
    const uint8_t *key
    Py_ssize_t key_len
    int digits
    bint checksum
    uint32_t server_id
    int update_type


cdef int parse_gtid(const uint8_t *p, Py_ssize_t n, uint64_t *out) noexcept nogil
cdef uint64_t mysql_gno(const uint8_t *p, Py_ssize_t n, Py_ssize_t *colon) noexcept nogil
cdef bint add_gtid(Domains *d, const uint64_t *g) noexcept nogil
cdef Py_ssize_t position_event(uint8_t *o, const EventForm *form, const Domains *d, uint64_t seq, uint64_t now_us,
                               const char *before, Py_ssize_t nb, uint64_t hi, const char *after,
                               Py_ssize_t na) noexcept nogil
