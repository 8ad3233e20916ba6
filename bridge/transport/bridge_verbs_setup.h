/* Opening, connecting and closing the rdma transport's queue pairs (bridge_verbs.h's
   paths), and the replica side's completion channel: libibverbs' functions, so only the
   compiled queue pair (bridge/transport/_verbs.pyx), which links libibverbs, includes it. */
#ifndef BRIDGE_VERBS_SETUP_H
#define BRIDGE_VERBS_SETUP_H

#include "bridge_verbs.h"
#include <infiniband/verbs.h>

/* The device named ``name`` opened and a protection domain on it: 0 or the errno (ENODEV: no such device). */
static inline int bv_domain_open(const char *name, struct ibv_context **ctx, struct ibv_pd **pd) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    int i, err = ENODEV;
    *ctx = NULL;
    *pd = NULL;
    if (list == NULL)
        return errno ? errno : ENODEV;
    for (i = 0; list[i] != NULL; i++) {
        if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
            *ctx = ibv_open_device(list[i]);
            err = *ctx == NULL ? (errno ? errno : ENODEV) : 0;
            break;
        }
    }
    ibv_free_device_list(list);
    if (err)
        return err;
    *pd = ibv_alloc_pd(*ctx);
    if (*pd == NULL) {
        err = errno ? errno : ENOMEM;
        ibv_close_device(*ctx);
        *ctx = NULL;
    }
    return err;
}

/* A receive side that sleeps (the replica side over rdma): a completion channel, a receive
   completion queue on it, and ``recvs`` zero-length receives posted, which a
   BV_WRITE_IMM consumes. */
typedef struct bv_wake {
    struct ibv_comp_channel *channel;
    struct ibv_cq *cq;
    int recvs;
} bv_wake;

/* The send completion queue and an RC queue pair on ``pd`` (its receive side on ``wake``'s
   completion queue where given, else on the send one), asking for ``inline_bytes`` of
   inline data (the device may give less: ``max_inline``): 0 or the errno. */
static inline int bv_open(bv_path *p, bv_wake *wake, struct ibv_pd *pd, int depth, int inline_bytes) {
    struct ibv_qp_init_attr init;
    struct ibv_qp *qp = NULL;
    struct ibv_cq *cq = ibv_create_cq(pd->context, depth, NULL, NULL, 0);
    if (cq == NULL)
        return errno ? errno : ENOMEM;
    for (; inline_bytes >= 0; inline_bytes = inline_bytes > 0 ? inline_bytes / 4 : -1) {
        memset(&init, 0, sizeof(init));
        init.qp_type = IBV_QPT_RC;
        init.send_cq = cq;
        init.recv_cq = wake != NULL && wake->cq != NULL ? wake->cq : cq;
        init.cap.max_send_wr = depth;
        init.cap.max_recv_wr = wake != NULL && wake->recvs > 0 ? wake->recvs : 1;
        init.cap.max_send_sge = init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = inline_bytes;
        qp = ibv_create_qp(pd, &init);
        if (qp != NULL || inline_bytes == 0)
            break;
    }
    if (qp == NULL) {
        int err = errno ? errno : ENOMEM;
        ibv_destroy_cq(cq);
        return err;
    }
    memset(p, 0, sizeof(*p));
    p->qp = qp;
    p->cq = cq;
    p->depth = (uint32_t)depth;
    p->max_inline = init.cap.max_inline_data;
    p->max_msg = 1u << 30;  /* until bv_connect reads the port's */
    p->soft = 1;  /* until the caller says the device is a NIC (QueuePair.soft) */
    return 0;
}

/* INIT, RTR, RTS towards the peer's queue pair: RoCE (``dlid`` 0), a global route to ``dgid`` from GID
   ``sgid_index``, its packets marked with ``traffic_class`` (DSCP << 2) and ``sl``; InfiniBand, the peer's
   LID ``dlid`` in the subnet. 0 or the errno. */
static inline int bv_connect(bv_path *p, int port, int access, int mtu, uint32_t dest_qpn, uint32_t rq_psn,
                             uint32_t sq_psn, const uint8_t *dgid, int sgid_index, int traffic_class, int sl,
                             int dlid, int timeout, int retry_cnt, int rnr_retry, int min_rnr_timer) {
    struct ibv_qp *qp = (struct ibv_qp *)p->qp;
    struct ibv_qp_attr a;
    struct ibv_port_attr port_attr;
    int rc;
    if (ibv_query_port(qp->context, (uint8_t)port, &port_attr) == 0 && port_attr.max_msg_sz > 0)
        p->max_msg = port_attr.max_msg_sz < (1u << 30) ? port_attr.max_msg_sz : (1u << 30);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = port;
    a.pkey_index = 0;
    a.qp_access_flags = access;
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc)
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = min_rnr_timer;
    a.ah_attr.port_num = port;
    a.ah_attr.sl = (uint8_t)sl;
    if (dlid) {
        a.ah_attr.dlid = (uint16_t)dlid;
    } else {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.grh.traffic_class = (uint8_t)traffic_class;
    }
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = sq_psn;
    a.timeout = timeout;
    a.retry_cnt = retry_cnt;
    a.rnr_retry = rnr_retry;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                         IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* What the queue pair's address vector holds, as the device took it (ibv_query_qp): its
   traffic class, service level, source GID index and port, or -1 each where the query failed. */
static inline void bv_address(const bv_path *p, int *traffic_class, int *sl, int *sgid_index, int *port) {
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr init;
    *traffic_class = *sl = *sgid_index = *port = -1;
    if (ibv_query_qp((struct ibv_qp *)p->qp, &a, IBV_QP_AV, &init) == 0) {
        *traffic_class = a.ah_attr.grh.traffic_class;
        *sl = a.ah_attr.sl;
        *sgid_index = a.ah_attr.grh.sgid_index;
        *port = a.ah_attr.port_num;
    }
}

static inline uint32_t bv_qp_num(const bv_path *p) {
    return ((struct ibv_qp *)p->qp)->qp_num;
}

/* Moves the queue pair to the error state: its work requests, and the peer's, fail from now on. */
static inline int bv_break(bv_path *p) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    return ibv_modify_qp((struct ibv_qp *)p->qp, &a, IBV_QP_STATE);
}

static inline void bv_close(bv_path *p) {
    if (p->qp != NULL)
        ibv_destroy_qp((struct ibv_qp *)p->qp);
    if (p->cq != NULL)
        ibv_destroy_cq((struct ibv_cq *)p->cq);
    p->qp = p->cq = NULL;
}

/* --- the replica side's sleep: a completion channel the receives complete on ----------- */

static inline int bv_wake_open(bv_wake *w, struct ibv_context *ctx, int recvs) {
    memset(w, 0, sizeof(*w));
    w->channel = ibv_create_comp_channel(ctx);
    if (w->channel == NULL)
        return errno ? errno : ENOMEM;
    w->cq = ibv_create_cq(ctx, recvs, NULL, w->channel, 0);
    if (w->cq == NULL) {
        int err = errno ? errno : ENOMEM;
        ibv_destroy_comp_channel(w->channel);
        w->channel = NULL;
        return err;
    }
    w->recvs = recvs;
    return 0;
}

/* Posts ``n`` zero-length receives on ``qp`` (a BV_WRITE_IMM consumes one): 0 or the errno. */
static inline int bv_wake_recv(struct ibv_qp *qp, int n) {
    struct ibv_recv_wr wr, *bad = NULL;
    int rc;
    for (; n > 0; n--) {
        memset(&wr, 0, sizeof(wr));
        if ((rc = ibv_post_recv(qp, &wr, &bad)) != 0)
            return rc;
    }
    return 0;
}

static inline void bv_wake_close(bv_wake *w) {
    if (w->cq != NULL)
        ibv_destroy_cq(w->cq);
    if (w->channel != NULL)
        ibv_destroy_comp_channel(w->channel);
    w->cq = NULL;
    w->channel = NULL;
}
#endif /* BRIDGE_VERBS_SETUP_H */
