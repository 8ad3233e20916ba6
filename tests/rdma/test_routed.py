"""Over a routed RoCE v2 network: the primary side and the replica side in two network
namespaces of the guest, on two subnets joined only through a third namespace that
routes between them (addresses from 198.18.0.0/15, set aside for network tests), each
with its own rxe device. Both sides must choose the IPv4-mapped GID of their own
address (a link-local one does not route), and every RoCE packet the router forwards
carries the DSCP asked for (--rdma-traffic-class); the databases are compared at the end.

Needs an rdma_rxe that opens its UDP sockets per network namespace (Linux 6.16 on; the
guest boots one): an older one sends from the initial namespace only."""

from __future__ import annotations

import collections
import ctypes
import os
import re
import socket
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bridge.check.compare import compare_databases
from bridge.errors import CheckError
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, wait_port
from bridge.lab.workload import MixedWorkload, connect, create_schema
from bridge.transport import rdma_available
from tests.conftest import primary_position
from tests.faults.proxy import FaultProxy
from tests.helpers import wait_for

if not rdma_available():
    pytest.skip("no RDMA device here: `make test-rdma` runs this in a Soft-RoCE guest", allow_module_level=True)

PRIMARY_NS, REPLICA_NS, ROUTER_NS = "rb_primary", "rb_replica", "rb_router"
PRIMARY_ADDRESS, REPLICA_ADDRESS = "198.19.0.2", "198.18.0.2"
TRAFFIC_CLASS = 104  # DSCP 26 << 2: the class RoCE fabrics commonly make lossless (PFC priority 3)
ROCE_V2_PORT = 4791
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _rxe_per_namespace() -> bool:
    """Whether this kernel's rdma_rxe keeps a UDP socket per network namespace (6.16 on)."""
    major, minor = (int(part) for part in re.match(r"(\d+)\.(\d+)", os.uname().release).groups())
    return (major, minor) >= (6, 16)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def routed():
    """replica ns 198.18.0.2/24 -- .1 router .1 -- 198.19.0.2/24 primary ns; rxe on each end."""
    if not _rxe_per_namespace():
        pytest.skip("this kernel's rdma_rxe sends from the initial network namespace only (Linux < 6.16)")
    for ns in (PRIMARY_NS, REPLICA_NS, ROUTER_NS):
        _ip("netns", "add", ns)
    try:
        for ns, end, near, address, gateway in ((REPLICA_NS, "rbva", "rbra", REPLICA_ADDRESS, "198.18.0.1"),
                                                (PRIMARY_NS, "rbvb", "rbrb", PRIMARY_ADDRESS, "198.19.0.1")):
            _ip("link", "add", end, "type", "veth", "peer", "name", near)
            _ip("link", "set", end, "netns", ns)
            _ip("link", "set", near, "netns", ROUTER_NS)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", end)
            _ip("-n", ROUTER_NS, "addr", "add", f"{gateway}/24", "dev", near)
            for netns, dev in ((ns, end), (ns, "lo"), (ROUTER_NS, near)):
                _ip("-n", netns, "link", "set", dev, "up")
            _ip("-n", ns, "route", "add", "default", "via", gateway)
            subprocess.run(["ip", "netns", "exec", ns, "rdma", "link", "add", f"rxe_{end}", "type", "rxe",
                            "netdev", end], check=True, capture_output=True)
        subprocess.run(["ip", "netns", "exec", ROUTER_NS, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
        yield
    finally:  # the devices deleted and gone before the next test lists them
        for ns, end in ((REPLICA_NS, "rbva"), (PRIMARY_NS, "rbvb")):
            subprocess.run(["ip", "netns", "exec", ns, "rdma", "link", "delete", f"rxe_{end}"], capture_output=True)
        for ns in (PRIMARY_NS, REPLICA_NS, ROUTER_NS):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        wait_for(lambda: not list(Path("/sys/class/infiniband").glob("rxe_rbv*")), "the routed test's rxe devices gone",
                 timeout_s=30)


@contextmanager
def in_netns(name: str):
    """This thread in network namespace ``name`` (sockets made meanwhile stay there)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    there = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name}")
        yield
    finally:
        if _libc.setns(home, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back home")
        os.close(there)
        os.close(home)


def _server_in(ns: str, url: str) -> tuple[str, FaultProxy]:
    """``url`` as a process in ``ns`` reaches it: through a forwarder listening on that
    namespace's loopback to the server's port on this one."""
    parts = urlsplit(url)
    with in_netns(ns):
        listener = socket.create_server(("127.0.0.1", 0))
    forwarder = FaultProxy((parts.hostname, parts.port), listener=listener)
    return url.replace(f"@{parts.hostname}:{parts.port}", f"@127.0.0.1:{forwarder.address[1]}"), forwarder


class RoceCapture:
    """The RoCE v2 packets the router forwards on its replica-side link: (source, DSCP) counted."""

    def __init__(self) -> None:
        with in_netns(ROUTER_NS):
            # ETH_P_ALL: a socket for IPv4 alone would see the link's received packets only
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            self.sock.bind(("rbra", 0))
        self.sock.settimeout(0.2)
        self.seen: collections.Counter = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="roce-capture", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                frame = self.sock.recv(65535)
            except TimeoutError:
                continue
            if frame[12:14] != b"\x08\x00":  # not IPv4
                continue
            ip = frame[14:]
            header = (ip[0] & 0x0F) * 4
            if ip[9] == socket.IPPROTO_UDP and int.from_bytes(ip[header + 2:header + 4], "big") == ROCE_V2_PORT:
                self.seen[(socket.inet_ntoa(ip[12:16]), ip[1] >> 2)] += 1

    def stop(self) -> collections.Counter:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return self.seen


def _equal(urls, schema: str) -> bool:
    try:
        return compare_databases(urls["primary_admin"], urls["replica_admin"], [schema]).ok
    except CheckError:  # the schema not on the replica yet
        return False


def test_replication_over_a_routed_roce_network_chooses_each_sides_routable_gid_and_marks_its_packets(
        routed, sandbox, urls, tmp_path):
    _, info = sandbox
    schema = channel = "rdma_routed"
    port = free_port()
    target, to_replica = _server_in(REPLICA_NS, info["replica"])
    source, to_primary = _server_in(PRIMARY_NS, info["primary"])
    replica = replica_process(target, port, "rdma", channel, str(tmp_path), extra=("--insecure-transport",))
    replica.args[replica.args.index("--listen") + 1] = f"{REPLICA_ADDRESS}:{port}"
    replica.launcher = ("ip", "netns", "exec", REPLICA_NS)
    pconn = connect(urls["primary_admin"])
    start_gtid = primary_position(pconn)
    pconn.close()
    primary = primary_process(source, port, "rdma", start_gtid, str(tmp_path),
                              extra=("--rdma-traffic-class", str(TRAFFIC_CLASS)))
    primary.args[primary.args.index("--replica") + 1] = f"{REPLICA_ADDRESS}:{port}"
    primary.launcher = ("ip", "netns", "exec", PRIMARY_NS)
    for side in (replica, primary):  # beyond loopback the control channel needs a shared secret
        side.env["RDMA_BRIDGE_SECRET"] = "routed-s3cret"

    def alive() -> None:
        replica.check_alive()
        primary.check_alive()

    capture = RoceCapture()
    try:
        replica.start()
        with in_netns(PRIMARY_NS):  # the replica side's address as the primary side reaches it: routed
            wait_port(port, alive=alive, host=REPLICA_ADDRESS)
        primary.start()
        conn = connect(urls["primary_admin"])
        create_schema(conn, schema)
        MixedWorkload(conn, schema, seed=58).run(200)
        conn.close()
        wait_for(lambda: _equal(urls, schema), "the replica equal to the primary over the routed network",
                 alive=alive, timeout_s=180)
    finally:
        primary.stop()
        replica.stop()
        seen = capture.stop()
        to_primary.close()
        to_replica.close()
    logs = {side.name: open(side.log_path).read() for side in (primary, replica)}
    # each side on the GID of its own address (index 0 is the link-local fe80:: one, which no router forwards)
    for side, address, device in (("primary", PRIMARY_ADDRESS, "rxe_rbvb"), ("replica", REPLICA_ADDRESS, "rxe_rbva")):
        assert f"{device} port 1, GID index 1 ({address}, RoCE v2), traffic class {TRAFFIC_CLASS}" in logs[side], \
            logs[side][-2000:]
        assert f"the GID of {address}" in logs[side], logs[side][-2000:]
    # both directions crossed the router, and every packet carried DSCP 26 (the replica side follows the primary's)
    sources = {source for source, _ in seen}
    assert sources == {PRIMARY_ADDRESS, REPLICA_ADDRESS}, seen
    assert {dscp for _, dscp in seen} == {TRAFFIC_CLASS >> 2}, seen
    result = compare_databases(urls["primary_admin"], urls["replica_admin"], [schema])
    assert result.ok and result.digests, [(d.table, d.missing, d.extra) for d in result.diffs]
