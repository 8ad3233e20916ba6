# The C every compiled module shares (bridge_native.h), declared once for Cython: little-endian
# integers, crc32c and crc32, base64 fed in pieces, the clock, the ring's memory orderings.
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME


cdef extern from "bridge_native.h" nogil:
    uint32_t rd32 "bridge_rd32"(const uint8_t *p) noexcept
    uint64_t rd64 "bridge_rd64"(const uint8_t *p) noexcept
    void wr32 "bridge_wr32"(uint8_t *p, uint32_t v) noexcept
    void wr64 "bridge_wr64"(uint8_t *p, uint64_t v) noexcept
    void bridge_crc_init()  # once per module that feeds a crc32c (the table is the module's own)
    void bridge_crc32_init()  # ... or a crc32
    uint32_t bridge_crc_feed(uint32_t c, const void *p, size_t n)
    uint32_t bridge_crc32(const uint8_t *p, size_t n)
    char *bridge_b64_into(char *o, const uint8_t *p, size_t n, uint32_t *carry, int *held)
    char *bridge_b64_end(char *o, uint32_t carry, int held)
    uint64_t now_ns "bridge_now_ns"(int clock) noexcept  # CLOCK_REALTIME or CLOCK_MONOTONIC
    void fence_acquire "bridge_fence_acquire"() noexcept
    void fence_release "bridge_fence_release"() noexcept
    void fence_full "bridge_fence_full"() noexcept
    void store_release_u64 "bridge_store_release_u64"(void *p, uint64_t v) noexcept
    uint64_t load_acquire_u64 "bridge_load_acquire_u64"(const void *p) noexcept
    uint32_t load_acquire_u32 "bridge_load_acquire_u32"(const void *p) noexcept
    void store_int "bridge_store_int"(int *p, int v) noexcept
    int load_int "bridge_load_int"(const int *p) noexcept
    bint cas_int "bridge_cas_int"(int *p, int expected, int desired) noexcept
