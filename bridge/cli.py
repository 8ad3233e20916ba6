"""Command line (click only here). Parses options into frozen configs and hands
them to the nodes; prints errors as one line naming the thing at fault."""

from __future__ import annotations

import json
import logging
import signal
import sys

import click

from bridge.config import (DEFAULT_RING_BYTES, PASSWORD_ENV, SECRET_ENV, MysqlUrl, PrimaryConfig, ReplicaConfig,
                           parse_hostport, read_secret)
from bridge.errors import BridgeError
from bridge.ring.layout import check_ring_bytes
from bridge.sandbox import DEFAULT_STATE_DIR, Sandbox

TRANSPORT = click.Choice(["shm", "tcp", "rdma"])
log = logging.getLogger("bridge")


class BridgeGroup(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BridgeError as exc:
            click.echo(f"rdma-bridge: error: {exc}", err=True)
            sys.exit(1)


@click.group(cls=BridgeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def main(log_level: str) -> None:
    """Replicate a MySQL/MariaDB primary into a replica through a ring buffer in the
    replica host's memory (RDMA WRITE, shared memory or TCP).

    \b
    Quick try on this machine:
      rdma-bridge sandbox up --json          # local MariaDB primary + replica
      rdma-bridge demo                       # both bridges, a workload, a verified match
    """
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# --- sandbox ---------------------------------------------------------------

@main.group()
def sandbox() -> None:
    """A local MariaDB primary + replica on free loopback ports."""


STATE_DIR = click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True,
                         type=click.Path(file_okay=False), help="Where the servers keep their data.")


@sandbox.command("up")
@STATE_DIR
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the URLs.")
@click.option("--native-replica", is_flag=True,
              help="Also run a third server as a native MariaDB GTID replica of the primary (benchmark baseline).")
def sandbox_up(state_dir: str, as_json: bool, native_replica: bool) -> None:
    """Create (once) and start the servers. Idempotent."""
    info = Sandbox(state_dir).up(native_replica=native_replica)
    if as_json:
        click.echo(json.dumps(info))
    else:
        click.echo(f"primary  {info['primary']}\nreplica  {info['replica']}\nstate    {info['state_dir']}")


@sandbox.command("down")
@STATE_DIR
def sandbox_down(state_dir: str) -> None:
    """Stop both servers (data is kept; `up` starts them again)."""
    stopped = Sandbox(state_dir).down()
    click.echo("stopped: " + (", ".join(stopped) or "nothing was running"))


@sandbox.command("status")
@STATE_DIR
def sandbox_status(state_dir: str) -> None:
    """Show whether the servers exist and run (as JSON)."""
    click.echo(json.dumps(Sandbox(state_dir).status(), indent=2))


# --- the two bridge ends ---------------------------------------------------

def _ring_bytes(_ctx, _param, value: int) -> int:
    try:
        return check_ring_bytes(value)
    except BridgeError as exc:
        raise click.BadParameter(str(exc)) from exc


def _hostport(_ctx, _param, value: str) -> tuple[str, int]:
    try:
        return parse_hostport(value)
    except BridgeError as exc:
        raise click.BadParameter(str(exc)) from exc


SECRET_FILE = click.option(
    "--secret-file", type=click.Path(dir_okay=False), default=None,
    help=f"File whose first line is the control channel's shared secret (else ${SECRET_ENV}). Both sides "
         "prove it to each other; required when the replica listens beyond loopback.")


@main.command("start-replica")
@click.option("--target", required=True, envvar="RDMA_BRIDGE_TARGET", metavar="URL",
              help="Replica server, mysql://user[:password]@host:port. Password also from "
                   f"${PASSWORD_ENV['target']}; the URL also from $RDMA_BRIDGE_TARGET (keeps it out of ps).")
@click.option("--listen", required=True, callback=_hostport, metavar="HOST:PORT",
              help="Control address the primary side connects to.")
@click.option("--transport", type=TRANSPORT, default="shm", show_default=True)
@click.option("--ring-bytes", type=int, default=DEFAULT_RING_BYTES, show_default=True, callback=_ring_bytes,
              help="Ring data area size, a power of two.")
@click.option("--channel", default="default", show_default=True,
              help="Name of this replication stream in rdma_bridge.bridge_meta.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Replica connections applying in parallel. Transactions whose rows (primary and unique "
                   "keys) do not overlap run at once; commits stay in primary order, so the replica only "
                   "ever shows a prefix of the primary's history. DDL and large transactions run alone.")
@SECRET_FILE
def start_replica(target: str, listen, transport: str, ring_bytes: int, channel: str, workers: int,
                  secret_file: str) -> None:
    """Host the ring and apply what arrives into the replica, exactly once, in order.

    \b
    Example:
      export RDMA_BRIDGE_TARGET_PASSWORD=...
      rdma-bridge start-replica --target mysql://rdma_apply@127.0.0.1:3307 \\
          --listen 127.0.0.1:7400 --transport shm
    Runs in the foreground; SIGTERM or Ctrl-C stops after the transaction in flight.
    """
    from bridge.node.replica import ReplicaNode

    cfg = ReplicaConfig(target=MysqlUrl.parse(target, PASSWORD_ENV["target"]), listen=listen,
                        transport=transport, ring_bytes=ring_bytes, channel=channel, workers=workers,
                        secret=read_secret(secret_file))
    node = ReplicaNode(cfg)
    _on_signals(node.stop)
    try:
        node.start()
        click.echo(f"replica ready on {node.address[0]}:{node.address[1]}", err=True)
        node.run()
    finally:
        node.close()
    log.info("replica stopped after applying %d transactions", node.applied_count)


@main.command("start-primary")
@click.option("--source", required=True, envvar="RDMA_BRIDGE_SOURCE", metavar="URL",
              help="Primary server, mysql://user[:password]@host:port. Password also from "
                   f"${PASSWORD_ENV['source']}; the URL also from $RDMA_BRIDGE_SOURCE.")
@click.option("--replica", required=True, callback=_hostport, metavar="HOST:PORT",
              help="The replica side's --listen address.")
@click.option("--transport", type=TRANSPORT, default="shm", show_default=True)
@click.option("--server-id", type=int, default=4242, show_default=True,
              help="Replica server id this reader registers with; unique among the primary's replicas.")
@click.option("--start-gtid", default="", metavar="GTIDSET|current",
              help="Where a new channel starts (used once, when the replica has no position): "
                   "a GTID set, 'current' for the primary's position now, or empty for the binlog start.")
@click.option("--backpressure-timeout", type=float, default=5.0, show_default=True, metavar="SECONDS",
              help="How long to wait for ring space before stopping with an error naming the backlog; "
                   "0 waits as long as it takes. Either way nothing is lost: a restart resumes.")
@click.option("--reconnect-attempts", type=click.IntRange(min=0), default=60, show_default=True,
              help="Reconnects (with backoff up to 2s) after a lost replica link or primary connection; "
                   "0 stops at the first loss.")
@SECRET_FILE
def start_primary(source: str, replica, transport: str, server_id: int, start_gtid: str,
                  backpressure_timeout: float, reconnect_attempts: int, secret_file: str) -> None:
    """Read the primary's binlog and place each transaction in the replica's ring.

    \b
    Example:
      export RDMA_BRIDGE_SOURCE_PASSWORD=...
      rdma-bridge start-primary --source mysql://rdma_repl@127.0.0.1:3306 \\
          --replica 127.0.0.1:7400 --transport shm
    Resumes from the replica's recorded position; SIGTERM or Ctrl-C stops cleanly.
    """
    from bridge.node.primary import PrimaryNode

    url = MysqlUrl.parse(source, PASSWORD_ENV["source"])
    cfg = PrimaryConfig(source=url, replica=replica, transport=transport, server_id=server_id,
                        start_gtid=_resolve_start(start_gtid, url), backpressure_timeout_s=backpressure_timeout,
                        reconnect_attempts=reconnect_attempts, secret=read_secret(secret_file))
    node = PrimaryNode(cfg)
    _on_signals(node.stop)
    try:
        node.run()
    finally:
        node.close()
    log.info("primary side stopped after shipping %d transactions (last %s)", node.shipped, node.last_gtid or "-")


def _resolve_start(start_gtid: str, url: MysqlUrl) -> str:
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


# --- verification and demo -------------------------------------------------

@main.command("verify")
@click.option("--primary", required=True, metavar="URL", envvar="RDMA_BRIDGE_VERIFY_PRIMARY")
@click.option("--replica", required=True, metavar="URL", envvar="RDMA_BRIDGE_VERIFY_REPLICA")
@click.option("--schema", "schemas", multiple=True, help="Schemas to compare (default: all user schemas).")
def verify(primary: str, replica: str, schemas: tuple[str, ...]) -> None:
    """Compare both databases row by row; exit 1 on any difference."""
    from bridge.check.compare import compare_databases

    result = compare_databases(MysqlUrl.parse(primary), MysqlUrl.parse(replica), list(schemas) or None)
    for name, (a, b) in result.digests.items():
        mark = "ok" if a == b else "DIFF"
        click.echo(f"{mark:4} {name:40} rows {a.rows:>8} / {b.rows:<8} sha256 {a.sha256[:12]} / {b.sha256[:12]}")
    result.raise_if_different()
    click.echo(f"match: {len(result.digests)} tables identical")


@main.command("demo")
@STATE_DIR
@click.option("--transactions", type=int, default=5000, show_default=True)
@click.option("--transport", type=click.Choice(["shm", "tcp"]), default="shm", show_default=True)
@click.option("--probes", type=int, default=300, show_default=True, help="Lag samples after the workload.")
def demo(state_dir: str, transactions: int, transport: str, probes: int) -> None:
    """Sandbox up, both bridges started, a mixed workload, then a verified match."""
    from bridge.demo import run_demo

    ok = run_demo(state_dir, transactions, transport, probes, echo=click.echo, progressbar=click.progressbar)
    sys.exit(0 if ok else 1)
