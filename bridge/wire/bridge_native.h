/* C shared by the compiled modules (declared for Cython in native_c.pxd): crc32c for ring
   frames, zlib's crc32 for binlog events, base64 fed in pieces, little-endian integers,
   the clock, and the memory orderings the ring's two ends agree on. The tables are static:
   each module that uses a crc calls its init once. */
#ifndef BRIDGE_NATIVE_H
#define BRIDGE_NATIVE_H

/* crc32c (Castagnoli, reflected 0x82F63B78), as the crc32c package computes it:
   crc32c(b, crc32c(a)) == crc32c(a + b). SSE4.2's crc32 instruction where the CPU
   has it (checked once), else a table. */
#include <stdint.h>
#include <stddef.h>
/* the byte table of a reflected crc of polynomial ``poly`` */
static inline void bridge_crc_table_of(uint32_t *table, uint32_t poly) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (poly & (0u - (c & 1u)));
        table[i] = c;
    }
}
static uint32_t bridge_crc_table[256];
static int bridge_crc_hw = -1;
static inline void bridge_crc_init(void) {
    bridge_crc_table_of(bridge_crc_table, 0x82F63B78u);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    bridge_crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    bridge_crc_hw = 0;
#endif
}
static inline uint32_t bridge_crc_sw(uint32_t c, const unsigned char *p, size_t n) {
    while (n--) c = bridge_crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2")))
static inline uint32_t bridge_crc_hw_run(uint32_t c, const unsigned char *p, size_t n) {
    uint64_t c64 = c;
    while (n >= 8) { uint64_t w; __builtin_memcpy(&w, p, 8); c64 = __builtin_ia32_crc32di(c64, w); p += 8; n -= 8; }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#else
static inline uint32_t bridge_crc_hw_run(uint32_t c, const unsigned char *p, size_t n) { return bridge_crc_sw(c, p, n); }
#endif
/* state form: start with 0xFFFFFFFF, feed, finish with ~ */
static inline uint32_t bridge_crc_feed(uint32_t c, const void *p, size_t n) {
    return bridge_crc_hw ? bridge_crc_hw_run(c, (const unsigned char *)p, n)
                         : bridge_crc_sw(c, (const unsigned char *)p, n);
}

/* crc32 (zlib's, reflected 0xEDB88320), as a binlog event's checksum */
static uint32_t bridge_crc32_table[256];
static inline void bridge_crc32_init(void) { bridge_crc_table_of(bridge_crc32_table, 0xEDB88320u); }
static inline uint32_t bridge_crc32(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = bridge_crc32_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

/* Standard base64 of a stream fed in pieces: up to 2 bytes wait in *carry (*held of them);
   bridge_b64_end writes the last quantum with its padding. */
static const char bridge_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static inline char *bridge_b64_into(char *o, const unsigned char *p, size_t n, uint32_t *carry, int *held) {
    for (size_t i = 0; i < n; i++) {
        *carry = (*carry << 8) | p[i];
        if (++*held == 3) {
            uint32_t v = *carry;
            o[0] = bridge_b64[(v >> 18) & 63]; o[1] = bridge_b64[(v >> 12) & 63];
            o[2] = bridge_b64[(v >> 6) & 63]; o[3] = bridge_b64[v & 63];
            o += 4;
            *carry = 0;
            *held = 0;
        }
    }
    return o;
}
static inline char *bridge_b64_end(char *o, uint32_t carry, int held) {
    if (held == 1) {
        o[0] = bridge_b64[(carry >> 2) & 63]; o[1] = bridge_b64[(carry << 4) & 63]; o[2] = '='; o[3] = '=';
        return o + 4;
    }
    if (held == 2) {
        o[0] = bridge_b64[(carry >> 10) & 63]; o[1] = bridge_b64[(carry >> 4) & 63];
        o[2] = bridge_b64[(carry << 2) & 63]; o[3] = '=';
        return o + 4;
    }
    return o;
}
/* little-endian integers read and written in place (ring headers, frames, binlog events) */
static inline uint32_t bridge_rd32(const uint8_t *p) {
    return p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t bridge_rd64(const uint8_t *p) { return bridge_rd32(p) | ((uint64_t)bridge_rd32(p + 4) << 32); }
static inline void bridge_wr32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void bridge_wr64(uint8_t *p, uint64_t v) { bridge_wr32(p, (uint32_t)v); bridge_wr32(p + 4, (uint32_t)(v >> 32)); }

/* nanoseconds of a clock (CLOCK_REALTIME: stage stamps both hosts compare; CLOCK_MONOTONIC: waits) */
#include <time.h>
static inline uint64_t bridge_now_ns(int clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The ring's orderings: a producer stores its frames, then (release) the seq that publishes
   them, then (seq_cst) reads the consumer's waiting flag; the consumer raises the flag, then
   (seq_cst) reads the seq again, and (acquire) reads frames only after their seq. */
static inline void bridge_fence_acquire(void) { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
static inline void bridge_fence_release(void) { __atomic_thread_fence(__ATOMIC_RELEASE); }
static inline void bridge_fence_full(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void bridge_store_release_u64(void *p, uint64_t v) { __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE); }
static inline uint64_t bridge_load_acquire_u64(const void *p) { return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE); }
static inline uint32_t bridge_load_acquire_u32(const void *p) { return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE); }
static inline void bridge_store_int(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static inline int bridge_load_int(const int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static inline int bridge_cas_int(int *p, int expected, int desired) {
    return __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
#endif
