"""The lab's commands: the sandbox servers (bridge.lab.sandbox), the mixed workload and
the demo. They try the bridge on this host; production use needs none of them."""

from __future__ import annotations

import json
import sys
import time

import click

from bridge.cli.options import STATE_DIR, renamed_option
from bridge.config import PASSWORD_ENV, MysqlUrl
from bridge.lab.images import FLAVORS, LOCAL
from bridge.lab.sandbox import DEFAULT_STATE_DIR, MAX_REPLICAS, Sandbox, replicas_in


@click.group()
def sandbox() -> None:
    """A local primary + replica (this host's MariaDB, or MariaDB or MySQL in containers) on free loopback ports."""


@sandbox.command("up")
@STATE_DIR
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the URLs.")
@click.option("--native-replica", is_flag=True,
              help="Also run a third server as a native MariaDB GTID replica of the primary (benchmark baseline).")
@click.option("--tls", is_flag=True,
              help="The servers take TCP clients only over TLS, with certificates of a CA the sandbox makes "
                   "(STATE_DIR/tls); the URLs verify them (ssl-ca, ssl-verify-cert), and the same files serve "
                   "the bridge's --tls-cert/--tls-key/--tls-ca. Once on, stays on for this state directory.")
@click.option("--flavor", type=click.Choice([LOCAL, *FLAVORS]), default=None,
              help=f"Which servers run the sandbox: {LOCAL} (this host's mariadbd, the default) or a MariaDB or "
                   "MySQL version run with podman in a container built here, once, from Debian's packages "
                   "(mariadb-11.8: Debian 13's, mysql-9.7: sid's; needs podman and mmdebstrap, a few minutes the "
                   "first time). Chosen when the sandbox is made.")
@click.option("--replica-flavor", type=click.Choice([LOCAL, *FLAVORS]), default=None,
              help="Another flavor for the replica (e.g. --replica-flavor mariadb-11.8: the upgrade path from "
                   "this host's 10.11 primary); default: --flavor.")
@click.option("--replicas", type=click.IntRange(1, MAX_REPLICAS), default=1, show_default=True,
              help="How many replica servers (replica, replica2, ...), each with the same accounts: to feed "
                   "several replicas from one primary. Servers added earlier are kept.")
@click.option("--standby", is_flag=True,
              help="Also run a native replica of the primary with a binlog of its own that keeps the primary's "
                   "GTIDs: promote it to rehearse a failover (start-primary --source STANDBY_URL then goes on "
                   "from where the channel stopped).")
def sandbox_up(state_dir: str, as_json: bool, native_replica: bool, tls: bool, flavor: str | None,
               replica_flavor: str | None, replicas: int, standby: bool) -> None:
    """Create (once) and start the servers. Idempotent."""
    info = Sandbox(state_dir).up(native_replica=native_replica, tls=tls, flavor=flavor, replica_flavor=replica_flavor,
                                 replicas=replicas, standby=standby)
    if as_json:
        click.echo(json.dumps(info))
    else:
        click.echo(f"primary  {info['primary']}")
        for role in ["replica"] + [f"replica{n}" for n in range(2, replicas_in(info) + 1)]:
            click.echo(f"{role:8} {info[role]}")
        if "standby" in info:
            click.echo(f"standby  {info['standby']}")
        click.echo(f"state    {info['state_dir']}")
        if "tls" in info:
            click.echo(f"tls      --tls-cert {info['tls']['cert']} --tls-key {info['tls']['key']} "
                       f"--tls-ca {info['tls']['ca']}")


@sandbox.command("down")
@STATE_DIR
def sandbox_down(state_dir: str) -> None:
    """Stop every server of the sandbox (data is kept; `up` starts them again)."""
    stopped = Sandbox(state_dir).down()
    click.echo("stopped: " + (", ".join(stopped) or "nothing was running"))


@sandbox.command("status")
@STATE_DIR
def sandbox_status(state_dir: str) -> None:
    """Show whether the servers exist and run (as JSON)."""
    click.echo(json.dumps(Sandbox(state_dir).status(), indent=2))


@click.command("workload")
@renamed_option("--source", "--target", "target", new_env="RDMA_BRIDGE_WORKLOAD", required=True, metavar="URL",
                help="The primary to write to (also $RDMA_BRIDGE_WORKLOAD; password also from "
                     "$RDMA_BRIDGE_WORKLOAD_PASSWORD).")
@click.option("--schema", default="demo", show_default=True, help="Created (dropped first) on the primary.")
@click.option("--transactions", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="How many transactions to commit, then stop.")
@click.option("--rate", type=click.FloatRange(min=0), default=0, show_default=True, metavar="TXN_PER_S",
              help="Pace the writes; 0: as fast as the primary takes them.")
def workload(target: str, schema: str, transactions: int, rate: float) -> None:
    """A mixed write workload (inserts, updates, deletes, a keyless ledger, key changes,
    occasional DDL) for trying a bridge, with a progress line every 1,000 transactions."""

    from bridge.lab.workload import MixedWorkload, connect, create_schema

    conn = connect(MysqlUrl.parse(target, PASSWORD_ENV["workload"]))
    create_schema(conn, schema)
    work, started, done = MixedWorkload(conn, schema), time.monotonic(), 0
    while done < transactions:
        work.run(1)
        done += 1
        if rate:
            time.sleep(max(0.0, started + done / rate - time.monotonic()))
        if done % 1000 == 0 or done == transactions:
            click.echo(f"workload: {done}/{transactions} transactions", err=True)
    conn.close()


@click.command("demo")
@STATE_DIR
@click.option("--transactions", type=click.IntRange(min=1), default=5000, show_default=True,
              help="How many transactions of the mixed workload the demo commits on the sandbox primary.")
@click.option("--transport", type=click.Choice(["shm", "tcp"]), default="shm", show_default=True,
              help="How the demo's bridge carries the ring: shared memory (one host) or TCP.")
@click.option("--probes", type=int, default=300, show_default=True, help="Lag samples after the workload.")
@click.option("--flavor", type=click.Choice([LOCAL, *FLAVORS]), default=None,
              help="The sandbox's servers: this host's MariaDB (default), or a version run in a container built "
                   "here from Debian's packages, e.g. --flavor mysql-9.7 (its own state directory, "
                   ".sandbox-mysql-9.7, unless --state-dir is given).")
@click.option("--apply-mode", type=click.Choice(["auto", "relay"]), default="auto", show_default=True,
              help="auto: the replica side applies (binlog mode between servers of one flavor). relay: the replica "
                   "server's own replication threads apply what the replica side serves them (its channel 'demo' "
                   "shows in SHOW SLAVE 'demo' STATUS / SHOW REPLICA STATUS FOR CHANNEL 'demo').")
def demo(state_dir: str, transactions: int, transport: str, probes: int, flavor: str | None,
         apply_mode: str) -> None:
    """Sandbox up, both bridges started, a mixed workload, then a verified match."""
    from bridge.lab.demo import run_demo

    if flavor not in (None, LOCAL) and state_dir == DEFAULT_STATE_DIR:
        state_dir = f"{DEFAULT_STATE_DIR}-{flavor}"
    ok = run_demo(state_dir, transactions, transport, probes, echo=click.echo, progressbar=click.progressbar,
                  flavor=flavor, apply_mode=apply_mode)
    sys.exit(0 if ok else 1)
