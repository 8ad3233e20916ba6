# The compiled apply lane (bridge/apply/lane/_lane.pyx; its twin is bridge.apply.lane): one
# group's bookkeeping and the lane's state, declared for Cython.
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from bridge.apply.lane._position cimport Domains, EventForm
from bridge.transport._receiver cimport Placements


cdef enum:
    MAX_QUERY = 0xFFFFFF - 1
    MYSQL_SET_MAX = 2048
    MYSQL_TXN_BYTES = 44
    MYSQL_GROUP_BYTES = 42
    # what the run keeps of each transaction of a group (``Lane.spans``, so many per transaction)
    SPAN_DATA = 0  # its row events: offset in the region, length
    SPAN_LEN = 1
    SPAN_AT = 2  # the ring offset after it
    SPAN_EVENTS = 3  # row events, heartbeats of the group up to it
    SPAN_BEATS = 4
    SPAN_BEAT = 5  # the group's last heartbeat up to it (its index), or -1
    SPAN_GTID = 6  # its GTID's text: offset in the region, length
    SPAN_GTID_LEN = 7
    SPAN = 8


cdef struct Group:
    # the transactions one round trip applies, as _take found them in the ring
    Py_ssize_t first  # their entries in the run's arrays start there
    Py_ssize_t n
    long events, beats
    Py_ssize_t total  # MariaDB: their row events' bytes (one BINLOG statement)
    Py_ssize_t sent  # MySQL: the most bytes their statements take
    uint64_t hi  # MySQL: the carried interval's end after them


cdef class Lane:
    cdef readonly bytes channel_key, position_map
    cdef readonly int digits
    cdef readonly bint checksum
    cdef readonly uint32_t server_id
    cdef readonly int update_type
    cdef readonly object engines  # the twin's: MySQL, the applier's {(schema, table): non-transactional}
    cdef readonly object _mysql  # the twin's MysqlPosition, or None (a MariaDB set)
    cdef bytes my_key, my_before, my_after  # MySQL, during a group: the uuid it carries, the set's text around it
    cdef EventForm form
    cdef Domains domains
    cdef public uint64_t seq
    cdef public Py_ssize_t tail
    cdef public uint64_t expected_seq
    cdef readonly long txns, beats, events  # of the last run, over its groups
    cdef readonly long groups, largest, given_back  # groups applied, the largest, frames of the one given back
    cdef readonly object last_gtid, heartbeat, error
    cdef readonly uint64_t picked_ns, heartbeat_ns
    cdef readonly Py_ssize_t position_bytes_max
    cdef uint64_t *stamps  # (picked, done, read, ship) ns of the last run's transactions
    cdef Py_ssize_t *spans  # SPAN per transaction of a group: its row events in the region, where it ends...
    cdef Py_ssize_t spans_room

    cdef int group(self, uint8_t *b, uint32_t epoch, int fd, bint tcp, long max_txns, long max_events,
                   Py_ssize_t max_bytes, Py_ssize_t limit, Placements *pl) except -100
    cdef int _take(self, const uint8_t *b, uint32_t epoch, long max_txns, long max_events, Py_ssize_t max_bytes,
                   Py_ssize_t room, Group *g) except -1
    cdef bint _follows(self, const uint8_t *text, Py_ssize_t n, Group *g) except -1
    cdef Py_ssize_t _tables(self, const uint8_t *p, Py_ssize_t pos, uint32_t length, bint *beat) except -2
    cdef char *_mariadb_query(self, char *o, const uint8_t *b, const Group *g, const uint8_t *position,
                              Py_ssize_t n)
    cdef char *_mysql_query(self, char *o, const uint8_t *b, const Group *g, uint64_t saved_seq, uint64_t saved_hi,
                            uint64_t picked)
    cdef int _settle(self, uint8_t *b, const Group *g, int status, int oks, uint64_t saved_seq,
                     uint64_t saved_hi) except -100
    cdef int room_for(self, Py_ssize_t n) except -1
    cdef bint transactional(self, const uint8_t *schema, Py_ssize_t schema_len, const uint8_t *table,
                            Py_ssize_t table_len) except -1
