# The C the compiled modules share (bridge_native.h), declared once for Cython.
from libc.stdint cimport uint8_t, uint32_t, uint64_t

cdef extern from "bridge_native.h":
    uint32_t rd32 "bridge_rd32"(const uint8_t *p) noexcept nogil
    uint64_t rd64 "bridge_rd64"(const uint8_t *p) noexcept nogil
    void wr32 "bridge_wr32"(uint8_t *p, uint32_t v) noexcept nogil
    void wr64 "bridge_wr64"(uint8_t *p, uint64_t v) noexcept nogil
    void bridge_crc_init()
    void bridge_crc32_init()
    uint32_t bridge_crc_feed(uint32_t c, const void *p, size_t n) nogil
    uint32_t bridge_crc32(const uint8_t *p, size_t n) nogil
    char *bridge_b64_into(char *o, const uint8_t *p, size_t n, uint32_t *carry, int *held) nogil
    char *bridge_b64_end(char *o, uint32_t carry, int held) nogil
