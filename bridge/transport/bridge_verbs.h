/* The rdma transport's work requests in C (declared for Cython in verbs_c.pxd): one queue
   pair's path to the replica's ring, and what the compiled ship lane and the compiled
   queue pair (bridge/transport/_verbs.pyx) do with it. Its pure-Python twin is
   bridge/transport/verbs.py (pyverbs).

   Posting and polling are libibverbs' inline calls through the device's own functions
   (ibv_post_send, ibv_poll_cq): a module that only posts and polls, as the ship lane does,
   needs verbs.h to build and nothing at run time. Opening a queue pair, moving it to RTS
   and closing it (bridge_verbs_setup.h, _verbs.pyx only) link libibverbs.

   Where verbs.h is missing at build time, BRIDGE_HAVE_VERBS is 0 and every call answers
   ENOSYS: the ship lane then refuses rdma rings, and the transport uses pyverbs. */
#ifndef BRIDGE_VERBS_H
#define BRIDGE_VERBS_H

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if defined(__has_include)
#if __has_include(<infiniband/verbs.h>)
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#define BRIDGE_HAVE_VERBS 1
#endif
#endif
#ifndef BRIDGE_HAVE_VERBS
#define BRIDGE_HAVE_VERBS 0
#endif

enum {
    BV_CHAIN = 64,      /* work requests queued before they are posted together */
    BV_WRITE = 0,       /* the kinds of work request queued: an RDMA WRITE ... */
    BV_READ = 1,        /* ... an RDMA READ into the mirror ... */
    BV_WRITE_IMM = 2,   /* ... a WRITE that consumes a receive at the replica side (wakes it) */
    BV_FAILED = -1,     /* bv_reap, bv_wait: an error completion (status and opcode kept) */
    BV_PENDING = -2,    /* bv_reap: signaled requests not completed yet */
    BV_SPINS_BEFORE_YIELD = 64,  /* empty polls before each further one yields the CPU first */
    BV_HEADER_EVERY = 16,  /* a publish writes the ring's header (a hint: a placement is its frames' write) this
                              often, inline (every time, signaled, where the device writes nothing inline) */
};

/* One queue pair's path from the registered mirror to the replica's ring: a byte at offset
   o of the mirror goes to offset o of the ring. Writes are queued (contiguous ones merged
   into one), posted as one chain with only the last signaled, and waited for by polling
   the send completion queue: RC completes in order, so one completion covers the chain. */
typedef struct bv_path {
    void *qp, *cq;            /* struct ibv_qp *, its send struct ibv_cq * */
    uint64_t local, remote;   /* the mirror's address here, the ring's at the replica */
    uint32_t lkey, rkey;
    uint32_t max_inline;      /* the queue pair's max_inline_data */
    uint32_t max_msg;         /* its port's max_msg_sz: no write longer (a longer one is split, merges stop short) */
    int soft;                 /* a software device (Soft-RoCE, soft-iWARP): a spin yields the CPU now and then */
    uint32_t depth;           /* its send queue's depth */
    int outstanding;          /* signaled work requests posted and not completed */
    int unsignaled;           /* posted since the last signaled one */
    int status, opcode;       /* the first error completion's */
    int queued;               /* work requests in ``kind``/``at``/``len``/``to`` */
    uint8_t kind[BV_CHAIN];
    uint64_t at[BV_CHAIN], to[BV_CHAIN];
    uint32_t len[BV_CHAIN];
    uint32_t imm;             /* the immediate data of a BV_WRITE_IMM */
    uint32_t publishes;       /* publishes posted (the header is written with every BV_HEADER_EVERY-th) */
} bv_path;

static inline uint64_t bv_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Posts what is queued as one chain, the last one signaled where ``signaled`` (or where the
   send queue would otherwise fill with requests never reaped): 0, or the errno. */
static inline int bv_post(bv_path *p, int signaled) {
#if BRIDGE_HAVE_VERBS
    struct ibv_send_wr wr[BV_CHAIN], *bad = NULL;
    struct ibv_sge sge[BV_CHAIN];
    int i, n = p->queued, rc;
    if (n == 0)
        return 0;
    if (p->qp == NULL)
        return ENOTCONN;  /* closed */
    if (p->unsignaled + n >= (int)p->depth / 2)
        signaled = 1;
    memset(wr, 0, sizeof(wr[0]) * n);
    for (i = 0; i < n; i++) {
        sge[i].addr = p->local + p->at[i];
        sge[i].length = p->len[i];
        sge[i].lkey = p->lkey;
        wr[i].wr_id = i;
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
        wr[i].wr.rdma.remote_addr = p->remote + p->to[i];
        wr[i].wr.rdma.rkey = p->rkey;
        if (p->kind[i] == BV_READ) {
            wr[i].opcode = IBV_WR_RDMA_READ;
        } else {
            wr[i].opcode = p->kind[i] == BV_WRITE_IMM ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
            if (p->len[i] <= p->max_inline)
                wr[i].send_flags = IBV_SEND_INLINE;  /* copied at the post: no DMA read of the mirror */
            if (p->kind[i] == BV_WRITE_IMM)
                wr[i].imm_data = htonl(p->imm);
        }
    }
    if (signaled)
        wr[n - 1].send_flags |= IBV_SEND_SIGNALED;
    rc = ibv_post_send((struct ibv_qp *)p->qp, wr, &bad);
    p->queued = 0;
    if (rc)
        return rc;
    if (signaled) {
        p->outstanding += 1;
        p->unsignaled = 0;
    } else {
        p->unsignaled += n;
    }
    return 0;
#else
    (void)p; (void)signaled;
    return ENOSYS;
#endif
}

/* Queues one work request (an RDMA WRITE that continues the last queued one in both the
   mirror and the ring is merged into it while the two stay within the port's max_msg_sz; a
   longer one goes as several), posting the chain first when it is full. */
static inline int bv_queue(bv_path *p, int kind, uint64_t at, uint32_t len, uint64_t to) {
    int last = p->queued - 1, rc;
    while (len > p->max_msg) {
        if ((rc = bv_queue(p, kind, at, p->max_msg, to)) != 0)
            return rc;
        at += p->max_msg;
        to += p->max_msg;
        len -= p->max_msg;
    }
    if (kind == BV_WRITE && last >= 0 && p->kind[last] == BV_WRITE && p->at[last] + p->len[last] == at &&
            p->to[last] + p->len[last] == to && (uint64_t)p->len[last] + len <= p->max_msg) {
        p->len[last] += len;
        return 0;
    }
    if (p->queued == BV_CHAIN && (rc = bv_post(p, 0)) != 0)
        return rc;
    p->kind[p->queued] = (uint8_t)kind;
    p->at[p->queued] = at;
    p->len[p->queued] = len;
    p->to[p->queued] = to;
    p->queued += 1;
    return 0;
}

/* Polls the send completion queue once, without waiting: 0 once every signaled request
   completed, BV_PENDING while some have not, BV_FAILED at an error completion (``status``,
   ``opcode``: the link, or the peer's queue pair, is gone), or an errno. */
static inline int bv_reap(bv_path *p) {
#if BRIDGE_HAVE_VERBS
    struct ibv_wc wc[16];
    int i, n;
    if (p->outstanding <= 0)
        return 0;
    if (p->cq == NULL)
        return ENOTCONN;  /* closed */
    n = ibv_poll_cq((struct ibv_cq *)p->cq, p->outstanding < 16 ? p->outstanding : 16, wc);
    if (n < 0)
        return EIO;
    for (i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            p->status = wc[i].status;
            p->opcode = wc[i].opcode;
            p->outstanding = 0;
            return BV_FAILED;
        }
    }
    p->outstanding -= n;
    return p->outstanding > 0 ? BV_PENDING : 0;
#else
    (void)p;
    return ENOSYS;
#endif
}

/* One more empty poll of a spin on ``p``: on a software device (``soft``: Soft-RoCE and
   soft-iWARP complete in kernel tasks on the same CPUs) each after BV_SPINS_BEFORE_YIELD of
   them yields the CPU first; on a NIC, which completes by itself in microseconds, it only
   eases the spin (no system call). */
static inline void bv_relax(const bv_path *p, unsigned *spins) {
    if (p->soft && ++*spins > BV_SPINS_BEFORE_YIELD)
        sched_yield();
    else if (!p->soft) {
        ++*spins;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* Polls until every signaled request completed: 0; BV_FAILED or an errno as bv_reap;
   ETIMEDOUT when ``timeout_ns`` passed first. The wait is a spin: on a real NIC a
   completion takes microseconds, less than a sleep and its wakeup. */
static inline int bv_wait(bv_path *p, uint64_t timeout_ns) {
    uint64_t deadline = 0;
    unsigned spins = 0;
    int rc;
    while ((rc = bv_reap(p)) == BV_PENDING) {
        bv_relax(p, &spins);
        if ((spins & 1023) == 0) {
            uint64_t now = bv_now_ns();
            if (deadline == 0)
                deadline = now + timeout_ns;
            else if (now >= deadline)
                return ETIMEDOUT;
        }
    }
    return rc;
}

/* --- the replica side's sleep on its queue pair ------------------------------------------

   An idle replica side says it sleeps (``announce``: its ring's waiting word written into
   the primary side's mirror, the write's completion waited for), looks at its ring once
   more, then waits on its queue pair's completion channel (``fd``) until a write with
   immediate data consumes a receive there; ``taken`` takes those wakeups (the channel's
   events acknowledged, the receives posted again, the queue armed again). It announces
   once, and again only after a wakeup: the primary side sends one per announcement it
   finds, clearing the word. Both calls are the compiled queue pair's (_verbs.pyx, which
   links libibverbs); the apply lane sleeps through them without linking it. ``lock``
   keeps the queue pair from being closed under a call: ``open`` is 0 once it is. */
typedef struct bv_sleeper {
    pthread_mutex_t lock;
    int open;                       /* the queue pair may be used */
    int fd;                         /* its completion channel's file descriptor */
    int said;                       /* the waiting word is up in the primary side's mirror */
    int failed;                     /* a receive completed in error (the queue pair is in the error state):
                                       no sleep through it any more, its session must end */
    uint64_t wakeups;               /* writes with immediate data taken */
    void *owner;                    /* what the calls below act on */
    int (*announce)(void *owner);   /* 0, or an errno or BV_FAILED */
    int (*taken)(void *owner);      /* the wakeups taken: how many, or -1 (an error) */
} bv_sleeper;

static inline void bv_sleeper_init(bv_sleeper *s, void *owner, int (*announce)(void *), int (*taken)(void *)) {
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    s->fd = -1;
    s->owner = owner;
    s->announce = announce;
    s->taken = taken;
}

static inline void bv_took(bv_sleeper *s) {
    int n = s->taken(s->owner);
    if (n > 0) {
        s->wakeups += (uint64_t)n;
        s->said = 0;
    } else if (n < 0) {
        s->failed = 1;
    }
}

/* Before a sleep: the wakeups that came taken and, where the word is not up, the
   announcement made: the fd to wait on, or -1 (closed, failed, or the announcement failed:
   the caller polls, or ends the session where ``failed`` says so). */
static inline int bv_sleep_prepare(bv_sleeper *s) {
    int fd = -1;
    pthread_mutex_lock(&s->lock);
    if (s->open && !s->failed) {
        bv_took(s);
        if (!s->failed && (s->said || s->announce(s->owner) == 0)) {
            s->said = 1;
            fd = s->fd;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return fd;
}

/* After a sleep: the wakeups that woke it taken. */
static inline void bv_sleep_done(bv_sleeper *s) {
    pthread_mutex_lock(&s->lock);
    if (s->open)
        bv_took(s);
    pthread_mutex_unlock(&s->lock);
}

/* No call through ``s`` from now on (waits for one under way). */
static inline void bv_sleeper_shut(bv_sleeper *s) {
    pthread_mutex_lock(&s->lock);
    s->open = 0;
    pthread_mutex_unlock(&s->lock);
}

#endif /* BRIDGE_VERBS_H */
