"""RDMA placement latency (inside the Soft-RoCE guest, `make bench-rdma`): the rdma
transport placing one small frame (an RDMA WRITE of the frame, waiting for its
completion) next to perftest's `ib_write_lat` on the same device, in the same run:

- ``ship_lane``: the compiled ship lane's placement (bridge.source._placetiming.timed_placements:
  the calls a run makes, in C), and beneath it one signaled RDMA WRITE on the same queue
  pair (the floor), in rounds that alternate with `ib_write_lat` (the guest's speed
  drifts by 2x between phases: each round's ratios are taken against the `ib_write_lat`
  run just before it, and the median round reported);
- ``bridge_placement``: through the transport's Python API (RingProducer, then
  RdmaRemoteRing.write and publish), with each queue pair (the compiled one,
  bridge_verbs.h; pyverbs' twin): what the general path pays per placement.

`ib_write_lat` reports half a round trip (a ping-pong of writes); a placement waits for
its write's acknowledgement, a whole round trip, so 2x is where a placement costs
nothing beyond the network's.

    python3 -m bench.rdma_lat [--iterations 5000] [--size 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import statistics
import subprocess
import threading
import time

from bridge.lab.workload import percentile
from bridge.ring.producer import RingProducer
from bridge.transport import make_host, open_remote, rdma, verbs
from bridge.transport.sockets import ControlConnection
from bridge.wire import control
from bridge.wire.frame import FrameKind, frame_bytes

RING = 1 << 20


@contextlib.contextmanager
def _rdma_pair():
    """A replica side's ring host and a primary side's remote ring to it, over rdma."""
    host = make_host("rdma", RING)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        sock, _ = listener.accept()
        conn = ControlConnection(sock)
        conn.send(control.challenge())
        host.accept(conn, "", conn.recv())

    threading.Thread(target=serve, daemon=True).start()
    remote = open_remote("rdma", host.params(), listener.getsockname()[:2], RING)
    try:
        yield remote
    finally:
        remote.close()
        listener.close()
        host.close()


def bridge_placement(iterations: int, size: int, twin) -> dict:
    rdma.VERBS = twin
    producer, payload, samples = RingProducer(RING), b"x" * size, []
    with _rdma_pair() as remote:
        for i in range(iterations):
            t0 = time.perf_counter()
            for p in producer.append(FrameKind.TXN, payload):
                remote.write(p.offset, producer.region[p.offset:p.offset + p.length])
            remote.publish(producer.write_seq, producer.head)  # waits for the completions
            samples.append(time.perf_counter() - t0)
            producer.acknowledge(producer.write_seq)  # nobody consumes here: pretend applied
        assert type(remote.qp) is twin.QueuePair
    return _summary(samples)


def ship_lane_placement(iterations: int, size: int, bare: bool = False) -> dict:
    """The compiled ship lane's placement of a ``size``-byte payload's frame, in C (``bare``:
    one signaled RDMA WRITE of it on the same queue pair, the floor beneath a placement)."""
    from bridge.source import _placetiming

    rdma.VERBS = rdma._compiled
    with _rdma_pair() as remote:
        took = _placetiming.timed_placements(remote, iterations, frame_bytes(size), bare)
    return _summary([ns / 1e9 for ns in took])


def _summary(samples: list[float]) -> dict:
    return {"p50_us": round(percentile(samples, 50) * 1e6, 1), "p99_us": round(percentile(samples, 99) * 1e6, 1),
            "samples": len(samples)}


def perftest(iterations: int, size: int) -> dict:
    """ib_write_lat server and client on this host's rxe device (one-way latency is half
    the round trip it measures; we report its 'typical' and 99% columns as given)."""
    server = subprocess.Popen(["ib_write_lat", "-s", str(size), "-n", str(iterations)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    time.sleep(1.0)
    client = subprocess.run(["ib_write_lat", "-s", str(size), "-n", str(iterations), "127.0.0.1"],
                            capture_output=True, text=True, timeout=300)
    server.wait(timeout=30)
    out = client.stdout
    row = re.search(rf"^\s*{size}\s+{iterations}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
                    rf"\s+([\d.]+)", out, re.M)
    if not row:
        return {"error": "could not parse ib_write_lat output", "output": out[-800:]}
    t_min, t_max, typical, avg, stdev, p99, p999 = map(float, row.groups())
    return {"typical_us": typical, "p99_us": p99, "p999_us": p999}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=5000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    result = {"benchmark": "rdma placement latency (Soft-RoCE guest)", "size": args.size}
    if rdma.COMPILED:
        rounds = []
        for _ in range(args.rounds):
            theirs = perftest(args.iterations, args.size)
            floor = ship_lane_placement(args.iterations, args.size, bare=True)
            ours = ship_lane_placement(args.iterations, args.size)
            if "typical_us" in theirs:
                rounds.append({"ib_write_lat": theirs, "one_signaled_write": floor, "ship_lane": ours,
                               "ratio_p50": round(ours["p50_us"] / theirs["typical_us"], 2),
                               "ratio_p99": round(ours["p99_us"] / theirs["p99_us"], 2),
                               "ratio_p50_over_one_signaled_write": round(ours["p50_us"] / floor["p50_us"], 2),
                               "one_signaled_write_p50_over_ib_write_lat": round(floor["p50_us"] /
                                                                                 theirs["typical_us"], 2)})
        result["ship_lane_rounds"] = rounds
        if rounds:
            result["ratio_p50_ship_lane_over_ib_write_lat"] = statistics.median(r["ratio_p50"] for r in rounds)
            result["ratio_p99_ship_lane_over_ib_write_lat"] = statistics.median(r["ratio_p99"] for r in rounds)
            result["ratio_p50_ship_lane_over_one_signaled_write"] = statistics.median(
                r["ratio_p50_over_one_signaled_write"] for r in rounds)
            result["ratio_p50_one_signaled_write_over_ib_write_lat"] = statistics.median(
                r["one_signaled_write_p50_over_ib_write_lat"] for r in rounds)
    twins = {"pyverbs": verbs}
    if rdma.COMPILED:
        twins["compiled"] = rdma._compiled
    ours = {name: bridge_placement(args.iterations, args.size, qp) for name, qp in twins.items()}
    theirs = perftest(args.iterations, args.size)
    result.update({"bridge_placement": ours, "ib_write_lat": theirs})
    if "typical_us" in theirs:
        result["ratio_p50_over_ib_write_lat"] = {name: round(o["p50_us"] / theirs["typical_us"], 2)
                                                 for name, o in ours.items()}
        result["ratio_p99_over_ib_write_lat"] = {name: round(o["p99_us"] / theirs["p99_us"], 2)
                                                 for name, o in ours.items()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
