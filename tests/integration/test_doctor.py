"""`rdma-bridge doctor`: plain words on a host without RDMA, device checks on a
(fake) sysfs tree, and the MySQL side against the sandbox's real servers."""

import os
import subprocess
import sys

import pytest

from bridge.config import RdmaOptions
from bridge.lab.workload import connect
from bridge.ops import doctor


def statuses(checks):
    return {c.name: c.status for c in checks}


def test_no_rdma_here_is_said_plainly_with_what_to_use_instead(tmp_path):
    info = doctor.rdma_checks("tcp", 1 << 20, sysfs=tmp_path / "absent")
    assert [(c.status, c.name) for c in info] == [("INFO", "RDMA device")]
    assert "no RDMA support" in info[0].detail and "fine for --transport tcp" in info[0].detail
    fail = doctor.rdma_checks("rdma", 1 << 20, sysfs=tmp_path / "absent")
    assert fail[0].status == "FAIL" and "--transport tcp" in fail[0].fix and "shm" in fail[0].fix
    done = subprocess.run([sys.executable, "-m", "bridge", "doctor", "--transport", "rdma"], capture_output=True,
                          text=True)
    if "no RDMA support" in done.stdout:  # this machine: no RDMA in the kernel
        assert done.returncode == 1 and "FAIL  RDMA device" in done.stdout


def test_device_checks_on_a_sysfs_tree(tmp_path):
    port = tmp_path / "rxe0" / "ports" / "1"
    (port / "gid_attrs" / "types").mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "gid_attrs" / "types" / "0").write_text("IB/RoCE v1\n")
    (port / "gid_attrs" / "types" / "1").write_text("RoCE v2\n")
    (tmp_path / "rxe0" / "fw_ver").write_text("1.0\n")
    found = statuses(doctor.rdma_checks("rdma", 1 << 20, sysfs=tmp_path))
    assert found["rxe0 port 1"] == "PASS" and found["rxe0 GID type"] == "PASS"
    (port / "state").write_text("1: DOWN\n")
    (port / "gid_attrs" / "types" / "1").write_text("IB/RoCE v1\n")
    found = statuses(doctor.rdma_checks("rdma", 1 << 20, sysfs=tmp_path))
    assert found["rxe0 port 1"] == "FAIL" and found["rxe0 GID type"] == "WARN"
    assert "memlock limit" in found


def test_the_route_a_start_would_take_is_named_for_the_address(tmp_path):
    """The device, port and GID whose address the control connection runs over, and the
    marking; a link-local GID is a warning; a --gid-index that is missing a failure."""
    for dev, addresses in (("mlx5_0", ["fe80:0000:0000:0000:0e42:a1ff:fe9b:1c2e", "0000:0000:0000:0000:0000:ffff:0a00:0005"]),
                           ("mlx5_1", ["fe80:0000:0000:0000:0e42:a1ff:fe9b:1c2f", "0000:0000:0000:0000:0000:ffff:c612:0005"])):
        port = tmp_path / dev / "ports" / "1"
        (port / "gid_attrs" / "types").mkdir(parents=True)
        (port / "gids").mkdir()
        (port / "state").write_text("4: ACTIVE\n")
        (port / "link_layer").write_text("Ethernet\n")
        for i, gid in enumerate(addresses):
            (port / "gids" / str(i)).write_text(gid + "\n")
            (port / "gid_attrs" / "types" / str(i)).write_text("RoCE v2\n")
        (port / "gids" / "2").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")  # an empty slot
    routed = {c.name: c for c in doctor.rdma_checks("rdma", 1 << 20, sysfs=tmp_path, local_address="198.18.0.5",
                                                    rdma=RdmaOptions(traffic_class=104, service_level=3))}
    assert routed["rdma route"].status == "PASS"
    assert routed["rdma route"].detail == ("mlx5_1 port 1, GID index 1 (198.18.0.5, RoCE v2), traffic class 104, "
                                           "service level 3; the GID of 198.18.0.5, this side's end of the control "
                                           "connection")
    pinned = {c.name: c for c in doctor.rdma_checks("rdma", 1 << 20, sysfs=tmp_path,
                                                    rdma=RdmaOptions(device="mlx5_0", gid_index=0))}
    assert pinned["rdma route"].status == "WARN" and "GID index 0 (fe80::e42:a1ff:fe9b:1c2e" in \
        pinned["rdma route"].detail
    missing = {c.name: c for c in doctor.rdma_checks("rdma", 1 << 20, sysfs=tmp_path, rdma=RdmaOptions(gid_index=7))}
    assert missing["rdma route"].status == "FAIL" and "no GID at index 7" in missing["rdma route"].detail


def test_primary_and_replica_checks_against_the_sandbox(urls):
    good = doctor.primary_checks(urls["primary"], 4242)
    assert all(c.status in ("PASS", "INFO") for c in good), doctor.render(good)
    assert statuses(good)["primary semi-sync"] == "INFO"  # available, not on: said, not a failure
    assert statuses(doctor.primary_checks(urls["primary"], 1))["server ids"] == "FAIL"  # the primary's own id
    broad = statuses(doctor.primary_checks(urls["primary_admin"], 4242))
    assert broad["primary least privilege"] == "WARN"
    replica = doctor.replica_checks(urls["replica"])
    assert all(c.status in ("PASS", "INFO") for c in replica), doctor.render(replica)
    assert statuses(replica)["apply mode binlog grants"] == "PASS"


def test_an_applier_without_binlog_replay_is_refused_with_the_grant_to_run(urls, flavors):
    from bridge.config import ReplicaConfig
    from bridge.errors import ConfigError
    from bridge.node.replica import ReplicaNode

    admin = connect(urls["replica_admin"])
    with admin.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'doc_norows'@'127.0.0.1' IDENTIFIED BY 'pw-doc'")
        cur.execute("GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX ON *.* "
                    "TO 'doc_norows'@'127.0.0.1'")
    try:
        weak = urls["replica"].__class__(urls["replica"].host, urls["replica"].port, "doc_norows", "pw-doc")
        binlog, definer = ("REPLICATION_APPLIER", "SET_ANY_DEFINER, ALLOW_NONEXISTENT_DEFINER") \
            if flavors[1].is_mysql else ("BINLOG REPLAY", "SET USER")  # each flavor's names
        check = next(c for c in doctor.replica_checks(weak) if c.name == "apply mode binlog grants")
        assert check.status == "FAIL" and binlog in check.detail and definer.split(",")[0] in check.detail
        assert check.fix == f"GRANT {binlog}, {definer} ON *.* TO 'doc_norows'@'127.0.0.1'"
        sql_mode = next(c for c in doctor.replica_checks(weak, apply_mode="sql") if c.name.startswith("apply mode sql"))
        assert sql_mode.fix == f"GRANT {definer} ON *.* TO 'doc_norows'@'127.0.0.1'"
        with pytest.raises(ConfigError, match=rf"GRANT {binlog}, {definer} ON \*\.\* TO 'doc_norows'"):
            ReplicaNode(ReplicaConfig(target=weak, listen=("127.0.0.1", 0), apply_mode="binlog"))
    finally:
        with admin.cursor() as cur:
            cur.execute("DROP USER 'doc_norows'@'127.0.0.1'")
        admin.close()


def test_a_reader_without_replication_grants_fails_with_the_fix(urls, flavors):
    admin = connect(urls["primary_admin"])
    with admin.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute("CREATE USER IF NOT EXISTS 'doc_nogrant'@'127.0.0.1' IDENTIFIED BY 'pw-doc'")
    try:
        weak = urls["primary"].__class__(urls["primary"].host, urls["primary"].port, "doc_nogrant", "pw-doc")
        checks = doctor.primary_checks(weak, 4242)
        grant = next(c for c in checks if c.name == "primary grants of doc_nogrant")
        assert grant.status == "FAIL" and "REPLICATION SLAVE" in grant.detail
        assert grant.fix == f"apply sql/{flavors[0].grants_file('primary')}"  # the flavor's own file
        assert "pw-doc" not in doctor.render(checks)
    finally:
        with admin.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin=0")
            cur.execute("DROP USER 'doc_nogrant'@'127.0.0.1'")
        admin.close()


def test_pinning_near_the_nic_uses_its_numa_node(tmp_path):
    import os

    sysfs, nodes = tmp_path / "ib", tmp_path / "nodes"
    (sysfs / "mlx5_0" / "device").mkdir(parents=True)
    (sysfs / "mlx5_0" / "device" / "numa_node").write_text("1\n")
    (nodes / "node1").mkdir(parents=True)
    allowed = sorted(os.sched_getaffinity(0))
    (nodes / "node1" / "cpulist").write_text(f"{allowed[-1]}\n")
    assert doctor.nic_cpus(sysfs, nodes) == ("1", {allowed[-1]})
    before = os.sched_getaffinity(0)
    try:
        assert doctor.pin_near_nic(sysfs, nodes) == f"pinned to node 1, cpus [{allowed[-1]}]"
        assert os.sched_getaffinity(0) == {allowed[-1]}
    finally:
        os.sched_setaffinity(0, before)
    assert doctor.pin_near_nic(tmp_path / "absent", nodes).startswith("not pinned")


def test_clone_checks_say_what_clone_needs(urls, fresh_schema, mysql_primary):
    s = fresh_schema("doctor_clone")
    loose = "MyISAM" if mysql_primary else "Aria"
    with connect(urls["primary_admin"]).cursor() as cur:
        cur.execute(f"CREATE DATABASE {s}")
        cur.execute(f"CREATE TABLE {s}.fine (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute(f"CREATE TABLE {s}.loose (id INT PRIMARY KEY) ENGINE={loose}")
    found = statuses(doctor.clone_checks(urls["primary_admin"], [s], parallel=2))
    assert found["clone grants of rdma_admin"] == "PASS" and found["clone binlog retention"] == "PASS"
    engines = next(c for c in doctor.clone_checks(urls["primary_admin"], [s]) if c.name == "clone snapshot engines")
    assert engines.status == "WARN" and f"{s}.loose ({loose})" in engines.detail and "fine" not in engines.detail
    # the reader's account reads no table: clone cannot use it
    reader = doctor.clone_checks(urls["primary"], [s])
    assert statuses(reader)["clone grants of rdma_repl"] == "FAIL"
    assert "SELECT" in next(c.detail for c in reader if c.name == "clone grants of rdma_repl")


def test_doctor_names_both_servers_and_whether_the_pair_is_tested(sandbox, flavors):
    """The sandbox's pair (whichever flavors it runs: `make test-matrix` runs the three
    tested ones) is named with both versions and called tested."""
    _, info = sandbox
    done = subprocess.run([sys.executable, "-m", "bridge", "doctor", "--transport", "tcp"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "RDMA_BRIDGE_SOURCE": info["primary"],
                                                      "RDMA_BRIDGE_TARGET": info["replica"]})
    line = next(line for line in done.stdout.splitlines() if "server versions" in line)
    assert "PASS" in line and "a tested pair" in line, done.stdout
    assert all(f"({flavor.name})" in line for flavor in flavors), line
