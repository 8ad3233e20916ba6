"""`rdma-bridge doctor`: preflight for the usual RDMA pitfalls and the MySQL side,
each check PASS / WARN / FAIL / INFO with a fix hint; any FAIL exits 1.

RDMA facts come from sysfs (``/sys/class/infiniband``, ``/sys/class/net``), which is
readable without pyverbs and without privileges: device and port state, GID types
(RoCE v2), the netdev MTU, firmware version, the NIC's NUMA node, PFC/ECN where the
driver exposes them. The MySQL side reuses the primary preflight and reads the users'
grants (least privilege: required ones present, nothing broader than needed).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

import pymysql

from bridge.apply import modes
from bridge.config import MysqlUrl, RdmaOptions, TlsFiles
from bridge.errors import BridgeError, ConfigError
from bridge.server import dbconn
from bridge.server.flavor import Flavor
from bridge.server.grants import global_privileges, holds
from bridge.server.sqlnames import SYSTEM_SCHEMAS
from bridge.source import preflight
from bridge.transport import gids, tls

SYSFS = Path("/sys/class/infiniband")
NET = Path("/sys/class/net")
NODES = Path("/sys/devices/system/node")
BROAD = ("ALL PRIVILEGES", "SUPER", "GRANT OPTION", "FILE", "SHUTDOWN")


@dataclass(frozen=True, slots=True)
class Check:
    status: str  # PASS | WARN | FAIL | INFO
    name: str
    detail: str
    fix: str = ""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _cpus(cpulist: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, cpulist.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def nic_cpus(sysfs: Path = SYSFS, nodes: Path = NODES) -> tuple[str, set[int]] | None:
    """(NUMA node, its CPUs) of the first RDMA device, or None when unknown."""
    devices = sorted(p.name for p in sysfs.iterdir()) if sysfs.is_dir() else []
    for dev in devices:
        node = _read(sysfs / dev / "device" / "numa_node")
        if node and node != "-1":
            cpus = _cpus(_read(nodes / f"node{node}" / "cpulist"))
            if cpus:
                return node, cpus
    return None


def pin_near_nic(sysfs: Path = SYSFS, nodes: Path = NODES) -> str:
    """Restrict this process to the CPUs of the RDMA NIC's NUMA node (pitfall 5); says
    what it did."""
    found = nic_cpus(sysfs, nodes)
    if found is None:
        return "not pinned: no RDMA device with a NUMA node here"
    node, cpus = found
    usable = cpus & os.sched_getaffinity(0)
    if not usable:
        return f"not pinned: none of node {node}'s cpus {sorted(cpus)} is allowed to this process"
    os.sched_setaffinity(0, usable)
    return f"pinned to node {node}, cpus {sorted(usable)}"


def sysfs_gid_table(device: Path) -> list[gids.GidEntry]:
    """The non-zero GIDs of a device's active ports, as sysfs lists them (what
    bridge.transport.rdma reads through the verbs)."""
    out = []
    for port in sorted((device / "ports").glob("*"), key=lambda p: int(p.name) if p.name.isdigit() else 0):
        if not port.name.isdigit() or "ACTIVE" not in _read(port / "state"):
            continue
        layer = gids.INFINIBAND if _read(port / "link_layer") == gids.INFINIBAND else gids.ETHERNET
        for gid in sorted((port / "gids").glob("*"), key=lambda p: int(p.name) if p.name.isdigit() else 0):
            text = _read(gid)
            if not gid.name.isdigit() or not text or text.replace(":", "").strip("0") == "":
                continue
            kind = _read(port / "gid_attrs" / "types" / gid.name).lower()
            out.append(gids.GidEntry(int(port.name), int(gid.name), text, "v2" in kind, layer))
    return out


def route_check(devices: list[str], rdma: RdmaOptions, local_address: str, sysfs: Path = SYSFS) -> Check:
    """The device, port and GID a queue pair would take for ``local_address``, and how it
    would mark its packets (the start's log line and ``status`` say the same)."""
    tables = {dev: sysfs_gid_table(sysfs / dev) for dev in devices}
    try:
        device = gids.pick_device(tables, rdma.device, local_address)
        route = gids.choose(tables[device], device, local_address, rdma.port, rdma.gid_index)
    except ConfigError as exc:
        return Check("FAIL", "rdma route", str(exc), "name a device, port and GID index that exist (--rdma-device, "
                     "--rdma-port, --gid-index), or drop them to let the address decide")
    marking = f"traffic class {rdma.traffic_class or 0}, service level {rdma.service_level or 0}"
    detail = f"{device} port {route.port}, GID index {route.index} ({route.entry}, " \
             f"{'RoCE v2' if route.entry.roce_v2 else route.entry.link_layer}), {marking}; {route.reason}"
    if route.entry.link_layer == gids.ETHERNET and (route.entry.link_local or not route.entry.roce_v2):
        return Check("WARN", "rdma route", detail, "a link-local or RoCE v1 GID does not route: give the netdev an "
                     "IP address on the path to the peer and pass it as --local-address (pitfall 3)")
    if not route.by_address:
        return Check("INFO", "rdma route", detail, "pass --local-address (the replica side's --listen host, or this "
                     "host's address toward the replica side) to see the GID a start would take")
    return Check("PASS", "rdma route", detail)


def rdma_checks(transport: str, ring_bytes: int, sysfs: Path = SYSFS, rdma: RdmaOptions = RdmaOptions(),
                local_address: str = "") -> list[Check]:
    need = transport == "rdma"
    devices = sorted(p.name for p in sysfs.iterdir()) if sysfs.is_dir() else []
    if not devices:
        why = "this kernel has no RDMA support" if not sysfs.exists() else "no RDMA device is configured"
        if not need:
            return [Check("INFO", "RDMA device", f"none: {why}; fine for --transport {transport}")]
        return [Check("FAIL", "RDMA device", f"none: {why}",
                      "use --transport tcp between hosts, or shm on one host (same contract, same tests); for "
                      "RDMA load the NIC's driver, or Soft-RoCE: rdma link add rxe0 type rxe netdev <if>")]
    out = []
    for dev in devices:
        port = sysfs / dev / "ports" / "1"
        state = _read(port / "state")
        out.append(Check("PASS" if "ACTIVE" in state else "FAIL", f"{dev} port 1", state or "unreadable",
                         "" if "ACTIVE" in state
                         else "bring the link up (ip link set <if> up; check the cable/switch)"))
        types = {p.name: _read(p) for p in sorted((port / "gid_attrs" / "types").glob("*"))}
        v2 = [i for i, t in types.items() if "v2" in t.lower()]
        out.append(Check("PASS" if v2 else "WARN", f"{dev} GID type", f"RoCE v2 at GID index {v2[0]}" if v2 else
                         f"no RoCE v2 GID ({sorted(set(types.values())) or 'none readable'})",
                         "" if v2 else "assign an IP address to the netdev (RoCE v2 GIDs follow it); pitfall 3: a v1 "
                         "GID connects but cannot route"))
        netdevs = [p.name for p in (sysfs / dev / "device" / "net").glob("*")]
        for netdev in netdevs:
            mtu = _read(NET / netdev / "mtu")
            out.append(Check("INFO", f"{dev} MTU", f"{netdev} MTU {mtu}; path MTU is the smaller of both ends and "
                             "every hop", "make the MTU equal on both ends and along the path (pitfall 2)"))
            ecn = _read(NET / netdev / "ecn" / "roce_np" / "enable" / "3")
            out.append(Check("INFO" if ecn else "WARN", f"{netdev} PFC/ECN", f"ECN (priority 3) {ecn}" if ecn else
                             "not readable from sysfs for this driver",
                             "" if ecn else "check PFC/ECN on the NIC and every switch hop (pitfall 1: PFC storms)"))
        fw = _read(sysfs / dev / "fw_ver")
        out.append(Check("INFO", f"{dev} firmware", fw or "unreadable",
                         "both ends should run the same driver and firmware (pitfall 6)"))
        node = _read(sysfs / dev / "device" / "numa_node")
        if node and node != "-1":
            local = _cpus(_read(NODES / f"node{node}" / "cpulist"))
            mine = os.sched_getaffinity(0)
            ok = bool(local) and mine <= local
            out.append(Check("PASS" if ok else "WARN", f"{dev} NUMA", f"NIC on node {node} (cpus {sorted(local)}); "
                             f"this process may run on {sorted(mine)}",
                             "" if ok else f"pin the bridge to node {node}: numactl --cpunodebind={node} "
                             f"--membind={node} rdma-bridge ... (pitfall 5)"))
    out.append(route_check(devices, rdma, local_address, sysfs))
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    enough = soft == resource.RLIM_INFINITY or soft >= 2 * ring_bytes
    out.append(Check("PASS" if enough else "FAIL" if need else "WARN", "memlock limit",
                     f"{'unlimited' if soft == resource.RLIM_INFINITY else f'{soft} bytes'}; the ring needs "
                     f"{ring_bytes} bytes registered", "" if enough else
                     "ulimit -l unlimited (or LimitMEMLOCK=infinity in the systemd unit); pitfall 4"))
    return out


def primary_checks(url: MysqlUrl, server_id: int) -> list[Check]:
    try:
        conn = preflight.connect(url, "primary")
    except BridgeError as exc:
        return [Check("FAIL", "primary reachable", str(exc), "check host, port, user and password")]
    out = [Check("PASS", "primary reachable", str(url))]
    try:
        flavor = Flavor.of(conn)
        settings = preflight.read_settings(conn)
        out += [Check("PASS" if s.ok else "FAIL", f"primary {s.name}", s.have, "" if s.ok else s.fix)
                for s in preflight.setting_checks(settings)]
        clash = int(settings["server_id"]) == server_id
        out.append(Check("FAIL" if clash else "PASS", "server ids",
                         f"primary server_id {settings['server_id']}, the bridge reads as {server_id}",
                         "pass another --server-id" if clash else ""))
        out.append(semi_sync_check(conn, flavor))
        out += grant_checks(conn, "primary", url.user, flavor,
                            required=(("REPLICATION SLAVE",), ("BINLOG MONITOR", "REPLICATION CLIENT")),
                            wanted=() if flavor.is_mysql else
                            (("REPLICATION MASTER ADMIN", "REPLICATION CLIENT", "server id clash check"),))
    finally:
        conn.close()
    return out


def semi_sync_check(conn, flavor: Flavor) -> Check:
    """Whether the primary can have the bridge as a semi-sync replica (start-primary
    --semi-sync), by the loaded plugin's names."""
    if not flavor.semi_sync:
        return Check("INFO", "primary semi-sync", "no semi-sync plugin loaded: start-primary --semi-sync is refused",
                     f"for --semi-sync: {flavor.semi_sync_plugins}")
    enabled = flavor.semi_sync_variable("enabled")
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (%s, %s)",
                    (enabled, flavor.semi_sync_variable("timeout")))
        found = {k.lower(): v for k, v in cur.fetchall()}
    on = found.get(enabled, "OFF").upper() == "ON"
    return Check("INFO", "primary semi-sync", f"{enabled}={found.get(enabled, '?')}, timeout "
                 f"{found.get(flavor.semi_sync_variable('timeout'), '?')} ms" +
                 ("" if on else ": start-primary --semi-sync is refused until it is ON"),
                 "" if on else f"for --semi-sync: SET GLOBAL {enabled}=ON (and in my.cnf)")


def replica_checks(url: MysqlUrl, primary_server_id: int | None = None, apply_mode: str = "auto",
                   primary_flavor: Flavor | None = None) -> list[Check]:
    """``primary_flavor``: the primary's when it was checked too (auto mode then knows
    which apply mode it will be); unknown: the replica's own flavor."""
    try:
        conn = dbconn.connect(url)
    except pymysql.MySQLError as exc:
        return [Check("FAIL", "replica reachable", f"{url}: {exc.args[-1] if exc.args else exc}",
                      "check host, port, user and password")]
    out = [Check("PASS", "replica reachable", str(url))]
    try:
        flavor = Flavor.of(conn)
        out += grant_checks(conn, "replica", url.user, flavor,
                            required=(("SELECT",), ("INSERT",), ("UPDATE",), ("DELETE",), ("CREATE",), ("DROP",),
                                      ("ALTER",), ("INDEX",)), wanted=())
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id, VERSION()")
            rid, version = cur.fetchone()
            rid = int(rid)
        out += apply_mode_checks(conn, apply_mode, primary_flavor or flavor, flavor)
        out.append(read_only_check(conn, flavor))
        if flavor.is_mysql:
            out.append(gtid_check(conn, primary_flavor or flavor))
        if primary_server_id is not None:
            same = rid == primary_server_id
            out.append(Check("WARN" if same else "PASS", "replica server id", f"{rid}",
                             "give the replica its own server_id" if same else ""))
    finally:
        conn.close()
    return out


def read_only_check(conn, flavor: Flavor) -> Check:
    """Replicas normally run read_only=ON; the applier writes through it where its account
    may (the same check start-replica makes), never through super_read_only (MySQL)."""
    with conn.cursor() as cur:
        cur.execute(flavor.read_only_sql)
        read_only, super_read_only = (int(v) for v in cur.fetchone())
        cur.execute("SELECT CURRENT_USER()")
        user, _, host = cur.fetchone()[0].rpartition("@")
        cur.execute("SHOW GRANTS")
        may = holds(global_privileges(r[0] for r in cur.fetchall()), flavor.read_only_privileges)
    grant = flavor.read_only_privileges[0]
    if super_read_only:
        return Check("FAIL", "replica read_only", "super_read_only=ON: no account may write, the applier neither",
                     f"SET GLOBAL super_read_only=OFF, keep read_only=ON (the applier writes through it with {grant})")
    if read_only and not may:
        return Check("FAIL", "replica read_only", f"read_only=ON and {user} may not write through it",
                     modes.grant_statement([grant], user, host))
    if read_only:
        return Check("PASS", "replica read_only", f"read_only=ON: applications cannot write, the applier can ({grant})")
    lacking = "" if may else f"; {user} lacks {grant}, which applying needs once it is ON"
    return Check("INFO", "replica read_only", f"read_only=OFF: applications can write to the replica{lacking}",
                 "SET GLOBAL read_only=ON (and in my.cnf)" + ("" if may else
                                                             f"; {modes.grant_statement([grant], user, host)}"))


def gtid_check(conn, primary_flavor: Flavor) -> Check:
    """A MySQL replica keeps a MySQL primary's GTIDs (as a native replica does) when it
    runs with gtid_mode ON; else its transactions get GTIDs of its own, or none."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_mode")
        mode = str(cur.fetchone()[0])
    keeps = Flavor.of(conn).keeps_gtids(mode) and primary_flavor.is_mysql
    fine = keeps or not primary_flavor.is_mysql
    detail = f"gtid_mode {mode}: " + ("each transaction keeps its primary's GTID (failover by GTID works)" if keeps
                                       else "the replica's transactions do not carry the primary's GTIDs")
    return Check("PASS" if fine else "WARN", "replica GTIDs", detail,
                 "" if fine else "enforce_gtid_consistency=ON and gtid_mode=ON on the replica, as on the primary")


def apply_mode_checks(conn, requested: str, primary_flavor: Flavor, replica_flavor: Flavor) -> list[Check]:
    """The apply mode start-replica will use, and the privileges it needs (the same
    check start-replica makes before a session)."""
    try:
        mode = modes.choose(requested, primary_flavor.kind, replica_flavor.kind)
    except BridgeError as exc:
        return [Check("FAIL", "apply mode", str(exc), "use --apply-mode auto or sql")]
    out = [Check("INFO", "apply mode", f"{mode} (asked: {requested}; primary {primary_flavor.kind}, "
                                       f"replica {replica_flavor.kind})")]
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        user, _, host = cur.fetchone()[0].rpartition("@")
        cur.execute("SHOW GRANTS")
        privileges = global_privileges(r[0] for r in cur.fetchall())
    lacking = modes.missing(privileges, mode, replica_flavor)
    out.append(Check("FAIL" if lacking else "PASS", f"apply mode {mode} grants",
                     "missing " + "; ".join(f"{p} ({modes.why(p)})" for p in lacking) if lacking else
                     "BINLOG and DEFINER privileges granted" if mode == "binlog" else
                     "channel admin and monitor privileges granted" if mode == "relay" else "DEFINER privilege granted",
                     modes.grant_statement(lacking, user, host) if lacking else ""))
    return out


def grant_checks(conn, role: str, user: str, flavor: Flavor, required: tuple, wanted: tuple) -> list[Check]:
    """``required``: tuples of alternatives, one of each must be granted on *.*;
    ``wanted``: (privilege, alternative, what for) that only warn. The fix names the
    grants file of the server's flavor (sql/primary_grants_mysql.sql on MySQL)."""
    grants = f"sql/{flavor.grants_file(role)}" if role in ("primary", "replica") else f"sql/{role}_grants.sql"
    with conn.cursor() as cur:
        cur.execute("SHOW GRANTS")
        privileges = global_privileges(r[0] for r in cur.fetchall())
    out = []
    missing = [" or ".join(alts) for alts in required if not holds(privileges, alts)]
    out.append(Check("FAIL" if missing else "PASS", f"{role} grants of {user}",
                     f"missing {', '.join(missing)}" if missing else "the required privileges are granted",
                     f"apply {grants}" if missing else ""))
    for privilege, alternative, why in wanted:
        if not holds(privileges, (privilege, alternative)):
            out.append(Check("WARN", f"{role} grants of {user}", f"no {privilege} ({why})", f"apply {grants}"))
    broad = [b for b in BROAD if b in privileges]
    out.append(Check("WARN" if broad else "PASS", f"{role} least privilege",
                     f"{user} also has {', '.join(broad)}" if broad else "nothing broader than needed",
                     f"use a dedicated user with {grants} only" if broad else ""))
    return out


def tls_checks(files: TlsFiles) -> list[Check]:
    """The bridge's --tls-* files: readable, the key private and matching, the chain
    and the dates verified by a handshake of the files with themselves."""
    try:
        warnings = tls.check_files(files)
    except BridgeError as exc:
        return [Check("FAIL", "tls files", str(exc), "fix the file named; `rdma-bridge tls-certs` makes a new set")]
    found = [Check("WARN", "tls expiry", w, "issue a new certificate before then") for w in warnings]
    return found or [Check("PASS", "tls files", f"{files.cert} (key {files.key}) verifies against {files.ca}, "
                                                 f"key private")]


def render(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"{c.status:4}  {c.name:32} {c.detail}")
        if c.fix and c.status != "PASS":
            lines.append(f"{'':6}{'':32} fix: {c.fix}")
    fails = sum(c.status == "FAIL" for c in checks)
    warns = sum(c.status == "WARN" for c in checks)
    lines.append(f"{fails} failed, {warns} warnings, {len(checks) - fails - warns} passed or informational")
    return "\n".join(lines)


def version_or_none(url: MysqlUrl, role: str) -> str | None:
    """The server's version string; None when it cannot be reached."""
    try:
        conn = preflight.connect(url, role)
    except BridgeError:
        return None
    try:
        return preflight.read_settings(conn)["version"]
    finally:
        conn.close()


# Server pairs (primary, replica) the whole suite runs against in CI (`make test`, `make test-matrix`).
TESTED_PAIRS = (("mariadb-10.11", "mariadb-10.11"), ("mariadb-10.11", "mariadb-11.8"), ("mariadb-11.8", "mariadb-11.8"),
                ("mysql-9.7", "mysql-9.7"), ("mysql-9.7", "mariadb-10.11"), ("mariadb-10.11", "mysql-9.7"))


def server_line(version: str) -> str:
    """'mariadb-11.8' of '11.8.9-MariaDB-0+deb13u1', 'mysql-8.0' of '8.0.36'."""
    return Flavor.from_version(version).name


def pair_check(primary_version: str, replica_version: str) -> Check:
    """Both ends' servers, and whether that pair is one the tests run against."""
    pair = (server_line(primary_version), server_line(replica_version))
    seen = f"primary {primary_version} ({pair[0]}), replica {replica_version} ({pair[1]})"
    if pair in TESTED_PAIRS:
        return Check("PASS", "server versions", f"{seen}: a tested pair")
    tested = ", ".join(f"{p} -> {r}" for p, r in TESTED_PAIRS)
    return Check("WARN", "server versions", f"{seen}: not a pair the tests run against (tested: {tested})",
                 "a replica of the primary's version or newer, as native replication needs; test your pair "
                 "with the bridge's suite before relying on it")


CLONE_COPY_MB_PER_S = 10.0  # a conservative copy rate for the retention check (the benchmark: 15-18 MB/s)


def clone_checks(url: MysqlUrl, schemas: list[str], parallel: int = 1) -> list[Check]:
    """What `rdma-bridge clone` needs of the primary: its account's privileges, tables a
    consistent snapshot covers (transactional engines), and binlogs kept longer than the
    copy takes (the channel streams from the copy's position afterwards)."""
    try:
        conn = preflight.connect(url, "primary (clone)")
    except BridgeError as exc:
        return [Check("FAIL", "clone source reachable", str(exc), "check host, port, user and password")]
    try:
        out = grant_checks(conn, "clone", url.user, Flavor.of(conn),
                           required=(("SELECT",), ("SHOW VIEW",), ("TRIGGER",), ("EVENT",)),
                           wanted=() if parallel <= 1 else
                           (("RELOAD", "RELOAD", "--parallel above 1: several connections at one moment"),))
        with conn.cursor() as cur:
            where, args = ("TABLE_SCHEMA IN %s", (tuple(schemas),)) if schemas else \
                ("TABLE_SCHEMA NOT IN %s", (SYSTEM_SCHEMAS,))
            cur.execute("SELECT CONCAT(TABLE_SCHEMA, '.', TABLE_NAME, ' (', ENGINE, ')') FROM "
                        f"information_schema.TABLES WHERE {where} AND TABLE_TYPE='BASE TABLE' AND "
                        "ENGINE NOT IN ('InnoDB', 'RocksDB', 'TokuDB') ORDER BY 1", args)
            loose = [row[0] for row in cur.fetchall()]
            cur.execute(f"SELECT COALESCE(SUM(DATA_LENGTH), 0) FROM information_schema.TABLES WHERE {where}", args)
            data_bytes = int(cur.fetchone()[0])
            cur.execute("SELECT @@binlog_expire_logs_seconds")
            retention_s = int(cur.fetchone()[0] or 0)
    finally:
        conn.close()
    out.append(Check("WARN" if loose else "PASS", "clone snapshot engines",
                     f"not transactional: {', '.join(loose[:5])}{', ...' if len(loose) > 5 else ''}" if loose else
                     "every table is transactional: one consistent snapshot covers them all",
                     "ALTER TABLE ... ENGINE=InnoDB, or keep writes away from these tables while clone runs"
                     if loose else ""))
    copy_s = data_bytes / 1e6 / CLONE_COPY_MB_PER_S
    short = 0 < retention_s < max(3 * copy_s, 3600)
    out.append(Check("WARN" if short else "PASS", "clone binlog retention",
                     (f"binlogs kept {retention_s / 3600:.1f} h" if retention_s else "binlogs never expire") +
                     f"; the copy of {data_bytes / 1e9:.2f} GB takes about {copy_s / 60:.0f} min at "
                     f"{CLONE_COPY_MB_PER_S:.0f} MB/s",
                     "keep them at least three times as long as the copy (binlog_expire_logs_seconds), or the "
                     "channel cannot start from the copy's position" if short else ""))
    return out
