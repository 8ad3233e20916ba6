"""The commands that run the two bridge ends: start-replica and start-primary. Options
are parsed into frozen configs and handed to the nodes."""

from __future__ import annotations

import gc
import logging
import signal

import click

from bridge.cli.options import (
    PIN_NEAR_NIC,
    PRIMARY_METRICS_PORT,
    REALTIME,
    REPLICA_METRICS_PORT,
    RING_BYTES,
    SECRET_FILE,
    TRANSPORT_OPTION,
    filter_options,
    heartbeat_table_param,
    hostport_param,
    metrics_option,
    rdma_options,
    replicas_param,
    tls_options,
)
from bridge.config import PASSWORD_ENV, MysqlUrl, PrimaryConfig, ReplicaConfig, read_secret
from bridge.model import GtidSet

log = logging.getLogger("bridge")


def server_url_option(role: str, what: str):
    """--source / --target: the URL, its password also from the environment (kept out of ps)."""
    return click.option(f"--{role}", required=True, envvar=f"RDMA_BRIDGE_{role.upper()}", metavar="URL",
                        help=f"{what}, mysql://user[:password]@host:port. Password also from ${PASSWORD_ENV[role]}; "
                             f"the URL also from $RDMA_BRIDGE_{role.upper()} (keeps it out of ps).")


@click.command("start-replica")
@server_url_option("target", "Replica server")
@click.option("--listen", required=True, callback=hostport_param, metavar="HOST:PORT",
              help="Control address the primary side connects to.")
@TRANSPORT_OPTION
@rdma_options
@RING_BYTES
@click.option("--channel", default="default", show_default=True,
              help="Name of this replication stream in rdma_bridge.bridge_meta.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Replica connections applying in parallel. Transactions whose rows (primary and unique "
                   "keys) do not overlap run at once; commits stay in primary order, so the replica only "
                   "ever shows a prefix of the primary's history. DDL and large transactions run alone.")
@click.option("--apply-mode", type=click.Choice(["auto", "binlog", "sql", "relay"]), default="auto",
              show_default=True,
              help="binlog: the primary's row events are applied by the replica's own server (BINLOG statements, "
                   "as mariadb-binlog | mariadb does), so foreign-key cascades, triggers (never fired for "
                   "replicated rows), generated columns and every type behave as on a native replica; needs one "
                   "flavor on both sides and BINLOG REPLAY. sql: rows replayed as INSERT/UPDATE/DELETE, for a "
                   "MySQL primary into MariaDB or the reverse; refused while the replica has triggers. relay: this "
                   "side serves the primary's events to the replica server's own replication threads (a channel "
                   "named --channel, pointed here: see --relay-listen), so the replica is a real replica: SHOW "
                   "REPLICA STATUS, the primary's GTIDs, its parallel applier; one flavor on both sides. auto: "
                   "binlog when both servers are of one flavor, else sql.")
@click.option("--relay-listen", callback=hostport_param, default="127.0.0.1:0", show_default=True,
              metavar="HOST:PORT",
              help="--apply-mode relay: where the replica server's channel connects to this side (port 0: any free "
                   "one, the channel is pointed at it at each start).")
@click.option("--relay-configure", type=click.Choice(["yes", "no"]), default="yes", show_default=True,
              help="--apply-mode relay: yes: at each start, point the replica server's channel at this side (CHANGE "
                   "REPLICATION SOURCE TO / CHANGE MASTER TO with GTID positioning, then START; the --target user "
                   "needs REPLICATION_SLAVE_ADMIN, MariaDB REPLICATION SLAVE ADMIN). no: print the statement for you "
                   "to run (give a fixed --relay-listen port and --relay-password-file).")
@click.option("--relay-password-file", type=click.Path(dir_okay=False), default=None,
              help="--apply-mode relay: a file whose first line is the password the replica server's channel logs in "
                   "to this side with (user rdma_relay). Default: a new one at each start, set by --relay-configure "
                   "yes.")
@click.option("--spin-us", type=click.IntRange(min=0), default=0, show_default=True, metavar="MICROSECONDS",
              help="After a frame, keep polling the ring this long with zero sleeps (~70 µs apart: "
                   "Linux's timer slack; about a quarter of a core meanwhile), for a core given to the replica "
                   "side alone. Then it sleeps until the primary side wakes it: the ring's doorbell (shm, tcp), "
                   "a write with immediate data on its queue pair's completion channel (rdma; with the "
                   "pure-Python queue pair it polls every 200 µs). 0: sleep at once (polling takes CPU from the "
                   "servers on the same host, and a wakeup costs tens of microseconds).")
@PIN_NEAR_NIC
@REALTIME
@click.option("--delay", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="SECONDS",
              help="A delayed replica: apply each transaction no earlier than SECONDS after its commit on the "
                   "primary (as MASTER_DELAY), to have time to stop a bad DROP or UPDATE before it arrives.")
@click.option("--account-statements", type=click.Choice(["auto", "replay", "leave-out"]), default="auto",
              show_default=True,
              help="CREATE/ALTER/DROP USER and ROLE, GRANT, REVOKE, SET PASSWORD from the primary: replay them as a "
                   "native replica does (the apply user then needs CREATE USER ... WITH GRANT OPTION), or leave them "
                   "out (counted in status). auto: replay where the apply user may manage accounts.")
@click.option("--until-gtid", default="", metavar="GTIDSET",
              help="Stop applying once the replica holds this GTID set (point-in-time recovery); the process "
                   "stays up, `status` says so, `rdma-bridge resume` applies on.")
@metrics_option(REPLICA_METRICS_PORT)
@SECRET_FILE
@tls_options
@click.option("--insecure-transport", is_flag=True,
              help="Listen beyond loopback without TLS (said in the log at start): every replicated row crosses the "
                   "network in clear text. Only for a network you trust.")
@filter_options
def start_replica(target: str, listen, transport: str, rdma, ring_bytes: int, channel: str, workers: int,
                  apply_mode: str, relay_listen, relay_configure: str, relay_password_file: str | None, spin_us: int,
                  pin_near_nic: bool, realtime_priority: int, delay: float,
                  account_statements: str, until_gtid: str, metrics,
                  secret_file: str, tls, insecure_transport: bool, rules) -> None:
    """Host the ring and apply what arrives into the replica, exactly once, in order.

    \b
    Example:
      export RDMA_BRIDGE_TARGET_PASSWORD=...
      rdma-bridge start-replica --target mysql://rdma_apply@127.0.0.1:3307 \\
          --listen 127.0.0.1:7400 --transport shm
    Runs in the foreground; SIGTERM or Ctrl-C stops after the transaction in flight.

    \b
    --include/--exclude/--rename-schema are recorded with the channel on the
    replica (rdma-bridge clone records them too): later starts need not repeat
    them, and a start that would add tables to a channel is refused (their
    earlier rows were never copied); narrowing is allowed.
    """
    from bridge.node.relaying import RelayNode
    from bridge.node.replica import ReplicaNode

    if realtime_priority and spin_us:
        raise click.BadParameter(f"with --spin-us {spin_us}: a SCHED_FIFO thread that polls keeps its CPU from "
                                 "every normal process, the servers too; give --spin-us 0",
                                 param_hint="--realtime-priority")
    _schedule(pin_near_nic, realtime_priority)
    cfg = ReplicaConfig(target=MysqlUrl.parse(target, PASSWORD_ENV["target"]), listen=listen,
                        transport=transport, ring_bytes=ring_bytes, channel=channel, workers=workers,
                        apply_mode=apply_mode,
                        spin_s=spin_us / 1e6,
                        metrics=metrics, secret=read_secret(secret_file), delay_s=delay,
                        until_gtid=str(GtidSet.parse(until_gtid)) if until_gtid else "", tls=tls,
                        insecure_transport=insecure_transport, channel_filter=rules.to_json() if rules else "",
                        account_statements=account_statements, rdma=rdma, relay_listen=relay_listen,
                        relay_configure=relay_configure == "yes",
                        relay_password=read_secret(relay_password_file, "") if relay_password_file else "")
    node = RelayNode(cfg) if apply_mode == "relay" else ReplicaNode(cfg)
    _on_signals(node.stop)
    try:
        node.start()
        click.echo(f"replica ready on {node.address[0]}:{node.address[1]}", err=True)
        _freeze_heap()
        node.run()
    finally:
        node.close()
    log.info("replica stopped after applying %d transactions", node.counts.transactions_applied)


@click.command("start-primary")
@server_url_option("source", "Primary server")
@click.option("--replica", "replicas", required=True, multiple=True, callback=replicas_param,
              metavar="[TRANSPORT://]HOST:PORT",
              help="The replica side's --listen address. Give it several times to feed several replica sides from "
                   "one read of the binlog (fan-out): each its own ring, position and backpressure; one that falls "
                   "behind leaves the shared stream, catches up from a dump of its own (server id --server-id + 1 + "
                   "its place in this list) and rejoins. A TRANSPORT:// prefix (shm, tcp, rdma) feeds that one "
                   "over another transport than --transport, e.g. rdma members and a tcp one; it must be the one "
                   "that replica side serves.")
@TRANSPORT_OPTION
@rdma_options
@click.option("--server-id", type=int, default=4242, show_default=True,
              help="Replica server id this reader registers with; unique among the primary's replicas (with N "
                   "--replica, the ids up to this + N are used too, by catch-ups).")
@click.option("--start-gtid", default=None, metavar="GTIDSET|current",
              help="Where a new channel starts (used once, when the replica has no position): "
                   "a GTID set, 'current' for the primary's position now, or '' for the binlog start. Not "
                   "given: the binlog start, except that a replica already holding data (another channel's, "
                   "or a dump's) is refused rather than replayed into.")
@click.option("--backpressure-timeout", type=float, default=5.0, show_default=True, metavar="SECONDS",
              help="How long to wait for ring space before stopping with an error naming the backlog; "
                   "0 waits as long as it takes. Either way nothing is lost: a restart resumes.")
@click.option("--reconnect-attempts", type=click.IntRange(min=0), default=60, show_default=True,
              help="Reconnects (with backoff up to 2s) after a lost replica link or primary connection; "
                   "0 stops at the first loss.")
@click.option("--heartbeat-interval", type=click.FloatRange(min=0), default=0.1, show_default=True,
              metavar="SECONDS",
              help="Write a heartbeat row (rdma_bridge.heartbeat) on the primary this often; the replica side "
                   "reports primary-write -> replica-commit as the lag stage. 0: off.")
@click.option("--heartbeat-table", default=None, callback=heartbeat_table_param, metavar="SCHEMA.TABLE",
              help="With each heartbeat, also keep the primary's row of a table in pt-heartbeat's format (created "
                   "if missing; ts in UTC), so that `pt-heartbeat --check --utc --master-server-id ID`, ProxySQL "
                   "and Orchestrator read the bridge-fed replica's lag. Not needed where pt-heartbeat --update "
                   "already writes the primary: its rows travel the bridge like any other.")
@click.option("--semi-sync", type=click.Choice(["off", "received", "applied"]), default="off", show_default=True,
              help="Act as a semi-sync replica of the primary (rpl_semi_sync_master_enabled=ON there; MySQL "
                   "8.0.26+: rpl_semi_sync_source_enabled=ON). "
                   "received: ACK once the transaction is placed in the replica's ring; applied: ACK once "
                   "the replica committed it, so a client whose commit returned reads its write on the "
                   "replica. The form (sync/async), degradations and their reasons show in `status`.")
@click.option("--semi-sync-quorum", type=click.IntRange(min=1), default=1, show_default=True, metavar="K",
              help="With several --replica: the ACK goes once K replica sides hold (received) or committed "
                   "(applied) the transaction; one down, catching up or behind does not count. Fewer than K "
                   "answering: the ACK is skipped and counted, and the primary goes async after its timeout.")
@PIN_NEAR_NIC
@REALTIME
@click.option("--take-over", is_flag=True,
              help="If another primary side feeds this replica's channel, fence it off and take its place: the "
                   "replica side closes its session, gives this one fresh ring memory (rdma: a new memory region "
                   "and key), and never applies a frame of the old one. Without it, a second primary side is "
                   "refused with the running one named.")
@metrics_option(PRIMARY_METRICS_PORT)
@SECRET_FILE
@tls_options
def start_primary(source: str, replicas, transport: str, rdma, server_id: int, start_gtid: str | None,
                  backpressure_timeout: float, reconnect_attempts: int, heartbeat_interval: float,
                  heartbeat_table: str | None, semi_sync: str,
                  semi_sync_quorum: int, pin_near_nic: bool, realtime_priority: int, take_over: bool, metrics,
                  secret_file: str, tls) -> None:
    """Read the primary's binlog and place each transaction in the replica's ring.

    \b
    Example:
      export RDMA_BRIDGE_SOURCE_PASSWORD=...
      rdma-bridge start-primary --source mysql://rdma_repl@127.0.0.1:3306 \\
          --replica 127.0.0.1:7400 --transport shm
    Resumes from the replica's recorded position; SIGTERM or Ctrl-C stops cleanly.
    Fan-out: --replica once per replica side, and --semi-sync-quorum K; a
    replica side served over another transport: --replica tcp://HOST:PORT.
    """
    from bridge.node.fanout import FanOutNode
    from bridge.node.primary import PrimaryNode

    if semi_sync_quorum > len(replicas):
        raise click.BadParameter(f"{semi_sync_quorum} is more than the {len(replicas)} --replica given: no ACK "
                                 "could ever go", param_hint="--semi-sync-quorum")
    if heartbeat_table and heartbeat_interval == 0:
        raise click.BadParameter("needs a --heartbeat-interval above 0: the row is written with each heartbeat",
                                 param_hint="--heartbeat-table")
    if semi_sync_quorum > 1 and semi_sync == "off":
        raise click.BadParameter("needs --semi-sync received or applied", param_hint="--semi-sync-quorum")
    _schedule(pin_near_nic, realtime_priority)
    url = MysqlUrl.parse(source, PASSWORD_ENV["source"])
    addresses = tuple(address for address, _ in replicas)
    cfg = PrimaryConfig(source=url, replica=addresses[0], replicas=addresses, semi_sync_quorum=semi_sync_quorum,
                        transports=tuple(named for _, named in replicas), transport=transport, server_id=server_id,
                        start_gtid=_resolve_start(start_gtid, url), backpressure_timeout_s=backpressure_timeout,
                        reconnect_attempts=reconnect_attempts, heartbeat_row_s=heartbeat_interval,
                        heartbeat_table=heartbeat_table, metrics=metrics, semi_sync=semi_sync, take_over=take_over,
                        secret=read_secret(secret_file), tls=tls, rdma=rdma)
    node = FanOutNode(cfg) if len(replicas) > 1 else PrimaryNode(cfg)
    _on_signals(node.stop)
    _freeze_heap()
    try:
        node.run()
    finally:
        node.close()
    log.info("primary side stopped after shipping %d transactions (last %s)", node.counts.transactions_shipped,
             node.last_gtid or "-")


def _schedule(wanted: bool, realtime_priority: int) -> None:
    """Where and how this process runs: --pin-near-nic, --realtime-priority (before any thread starts)."""
    if wanted:
        from bridge.ops.doctor import pin_near_nic

        log.info("cpu affinity: %s", pin_near_nic())
    if realtime_priority:
        from bridge.node import realtime

        realtime.enter(realtime_priority)


def _freeze_heap() -> None:
    """What the process made to start (modules, classes, configs) moved out of the cyclic
    garbage collector's sight: it never becomes garbage, and a full collection, which
    stops every thread (a semi-sync ACK too), would walk all of it each time. No collection
    first: it would be a pause of its own, counted in the gc stage."""
    gc.freeze()
    log.info("garbage collector: %d objects of the start frozen", gc.get_freeze_count())


def _resolve_start(start_gtid: str | None, url: MysqlUrl) -> str | None:
    if start_gtid != "current":
        return start_gtid
    from bridge.source import preflight

    conn = preflight.connect(url, "primary")
    try:
        settings = preflight.read_settings(conn)
    finally:
        conn.close()
    return settings["gtid_binlog_pos"] or settings["gtid_executed"]


def _on_signals(stop) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop())
