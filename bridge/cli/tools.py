"""Commands to observe, operate, check and try a bridge: status, report, resume, skip,
doctor, checksum, repair, verify, workload, demo."""

from __future__ import annotations

import json
import sys

import click

from bridge.cli.options import (
    PRIMARY_METRICS_PORT,
    REPLICA_METRICS_PORT,
    RING_BYTES,
    SECRET_FILE,
    STATE_DIR,
    TRANSPORT,
    hostport_param,
    renamed_option,
    tls_options,
)
from bridge.config import PASSWORD_ENV, MysqlUrl, read_secret
from bridge.errors import ConfigError
from bridge.lab.images import FLAVORS, LOCAL
from bridge.lab.sandbox import DEFAULT_STATE_DIR

# --- status and report -------------------------------------------------------

NODE_OPTIONS = [
    renamed_option("--primary-metrics", "--primary", "primary_at", default=f"127.0.0.1:{PRIMARY_METRICS_PORT}",
                   show_default=True, metavar="HOST:PORT", help="The primary side's --metrics address."),
    renamed_option("--replica-metrics", "--replica", "replica_at", default=f"127.0.0.1:{REPLICA_METRICS_PORT}",
                   show_default=True, metavar="HOST:PORT", help="The replica side's --metrics address."),
]


def node_options(fn):
    for option in reversed(NODE_OPTIONS):
        fn = option(fn)
    return fn


@click.command("status")
@node_options
@click.option("--json", "as_json", is_flag=True, help="Both nodes' status documents as one JSON object.")
def status(primary_at: str, replica_at: str, as_json: bool) -> None:
    """Both bridge ends at a glance: position, throughput counters, ring backlog,
    reconnects, and each stage's latency percentiles.

    
    Exit code 1 when neither end answers.
    """
    from bridge.ops.report import fetch_status, status_table

    snapshot = fetch_status({"primary": primary_at, "replica": replica_at})
    click.echo(json.dumps(snapshot, indent=2) if as_json else status_table(snapshot))
    if not any("error" not in node for node in snapshot["nodes"].values()):
        sys.exit(1)


@click.command("report")
@node_options
@click.option("--from", "source", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A snapshot saved with `rdma-bridge status --json` instead of the running nodes.")
@click.option("--out", default="rdma-bridge-report.html", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write the report (HTML with SVG charts; open it in a browser).")
def report(primary_at: str, replica_at: str, source: str | None, out: str) -> None:
    """A picture of the latency distribution of every stage (log-scaled), with its
    P50/P99/P999/max, from the running pair or a saved snapshot."""
    from bridge.ops.report import fetch_status, render_html

    try:
        if source:
            with open(source, encoding="utf-8") as f:
                snapshot = json.load(f)
        else:
            snapshot = fetch_status({"primary": primary_at, "replica": replica_at})
        page = render_html(snapshot)
    except (ValueError, UnicodeDecodeError) as exc:  # json's errors are ValueErrors too
        raise ConfigError(f"report --from {source}: not a status snapshot (the JSON `rdma-bridge status --json` "
                          f"prints): {exc}") from exc
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as exc:
        raise ConfigError(f"report --out {out}: {exc.strerror}") from exc
    click.echo(f"report written: {out}")


# --- doctor ---------------------------------------------------------------------

@click.command("doctor")
@click.option("--transport", type=TRANSPORT, default="tcp", show_default=True,
              help="The transport you plan to use: with rdma, a missing device or memlock limit is a failure.")
@RING_BYTES
@click.option("--source", envvar="RDMA_BRIDGE_SOURCE", default=None, metavar="URL",
              help="Also check the primary: binlog settings, server ids, the reader's grants.")
@click.option("--target", envvar="RDMA_BRIDGE_TARGET", default=None, metavar="URL",
              help="Also check the replica: the applier's grants.")
@click.option("--server-id", type=int, default=4242, show_default=True,
              help="The start-primary --server-id to check: it must differ from every server id the primary "
                   "and its other replicas use.")
@click.option("--apply-mode", type=click.Choice(["auto", "binlog", "sql"]), default="auto", show_default=True,
              help="The start-replica --apply-mode to check the replica user's privileges for.")
@tls_options
@click.option("--clone-source", envvar="RDMA_BRIDGE_CLONE_SOURCE", default=None, metavar="URL",
              help="Also check what `rdma-bridge clone --source URL` needs: its account's privileges, tables a "
                   "consistent snapshot covers, binlogs kept longer than the copy takes.")
@click.option("--clone-schema", "clone_schemas", multiple=True, metavar="NAME",
              help="The schemas clone will copy (default: every user schema).")
@click.option("--clone-parallel", type=click.IntRange(1, 32), default=1, show_default=True,
              help="The clone --parallel you plan (above 1 needs RELOAD).")
def doctor(transport: str, ring_bytes: int, source: str | None, target: str | None, server_id: int,
           apply_mode: str, tls, clone_source: str | None, clone_schemas: tuple[str, ...], clone_parallel: int) -> None:
    """Check this host and the servers for the known pitfalls before you start: RDMA
    device and port, RoCE v2 GID, MTU, memlock, NUMA placement, firmware, PFC/ECN; the
    primary's binlog settings and server ids; least-privilege grants on both servers;
    with --tls-*, the certificate files (readable, key private and matching, chain, expiry);
    with --clone-source, what clone needs of the primary.

    \b
    Each line is PASS, WARN, FAIL or INFO, with a fix; exit code 1 on any FAIL.
    """
    from bridge.ops import doctor as checks
    from bridge.server.flavor import Flavor

    found = checks.rdma_checks(transport, ring_bytes)
    if tls is not None:
        found += checks.tls_checks(tls)
    if clone_source:
        found += checks.clone_checks(MysqlUrl.parse(clone_source, PASSWORD_ENV["source"]), list(clone_schemas),
                                     clone_parallel)
    primary_version = replica_version = None
    if source:
        primary = MysqlUrl.parse(source, PASSWORD_ENV["source"])
        found += checks.primary_checks(primary, server_id)
        primary_version = checks.version_or_none(primary, "primary")
    if target:
        replica = MysqlUrl.parse(target, PASSWORD_ENV["target"])
        found += checks.replica_checks(replica, apply_mode=apply_mode,
                                       primary_flavor=Flavor.from_version(primary_version) if primary_version else None)
        replica_version = checks.version_or_none(replica, "replica")
    if primary_version and replica_version:
        found.append(checks.pair_check(primary_version, replica_version))
    click.echo(checks.render(found))
    sys.exit(1 if any(c.status == "FAIL" for c in found) else 0)


@click.command("tls-certs")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Directory for the files.")
@click.option("--name", "names", multiple=True, required=True, metavar="HOST",
              help="A name the certificate is valid for: the replica side's host name or IP address as the primary "
                   "side dials it (--replica), and any other. Repeatable.")
def tls_certs(out: str, names: tuple[str, ...]) -> None:
    """Make a private CA and one certificate it signs (for serving and for connecting),
    for the bridge's --tls-cert/--tls-key/--tls-ca: a first set for two hosts.

    \b
    Files (keys mode 0600): ca.pem, ca-key.pem (keep it off the bridge hosts),
    HOST.pem, HOST-key.pem (HOST: the first --name). A CA already in --out is kept
    and signs the new one: run it once per host, copy ca.pem and that host's pair.
    \b
    Example:
      rdma-bridge tls-certs --out /etc/rdma-bridge/tls --name replica.example --name 10.0.0.2
    """
    from pathlib import Path

    from bridge.ops.certs import make_set

    files = make_set(Path(out), list(names))
    click.echo(f"--tls-cert {files.cert} --tls-key {files.key} --tls-ca {files.ca}")


# --- checksum and repair ------------------------------------------------------

CHECK_URLS = [
    renamed_option("--source", "--primary", "primary", new_env="RDMA_BRIDGE_CHECK_SOURCE",
                   old_env="RDMA_BRIDGE_CHECK_PRIMARY", required=True, metavar="URL",
                   help="The primary server, as a user that reads every table, may SET binlog_format (BINLOG ADMIN) "
                        "and write rdma_bridge.*; also from $RDMA_BRIDGE_CHECK_SOURCE (keeps the password out of "
                        "ps)."),
    renamed_option("--target", "--replica", "replica", new_env="RDMA_BRIDGE_CHECK_TARGET",
                   old_env="RDMA_BRIDGE_CHECK_REPLICA", required=True, metavar="URL",
                   help="The replica server, as a user that reads every table and writes rdma_bridge.*; also from "
                        "$RDMA_BRIDGE_CHECK_TARGET."),
    click.option("--channel", default="default", show_default=True, help="The bridge channel to wait for."),
]


def check_urls(fn):
    for option in reversed(CHECK_URLS):
        fn = option(fn)
    return fn


def _print_mismatches(mismatches) -> None:
    for m in mismatches:
        click.echo(f"MISMATCH {m.db}.{m.tbl} chunk {m.chunk} key {m.index or '(whole table)'} range "
                   f"({m.lower if m.lower is not None else '-inf'} .. {m.upper if m.upper is not None else '+inf'}]: "
                   f"primary {m.master_cnt} rows {m.master_crc}, replica {m.this_cnt} rows {m.this_crc}")


@click.command("checksum")
@check_urls
@click.option("--schema", "schemas", multiple=True, help="Schemas to check (default: all user schemas).")
@click.option("--table", "tables", multiple=True, help="Only these tables (name or schema.name).")
@click.option("--chunk-time", type=click.FloatRange(min=0.001), default=0.5, show_default=True, metavar="SECONDS",
              help="Target time per chunk on the primary; chunk sizes adapt to it.")
@click.option("--offline", is_flag=True,
              help="Two quiet servers, no bridge: hash each chunk on both directly and compare.")
@click.option("--max-rows-per-second", type=click.FloatRange(min=0), default=0, show_default=True, metavar="ROWS",
              help="Hash at most this many rows per second (0: no limit), so a scheduled check can run at any "
                   "hour; it also waits whenever the replica is behind the chunks it wrote.")
@click.option("--textfile", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write the outcome for Prometheus to FILE (the node exporter's textfile collector, e.g. "
                   "/var/lib/prometheus/node-exporter/rdma_bridge_checksum.prom): when this complete check ended, "
                   "tables, chunks, rows, chunks that differ. Replaced whole; a run that fails leaves it as it was.")
def checksum(primary: str, replica: str, channel: str, schemas, tables, chunk_time: float, offline: bool,
             max_rows_per_second: float, textfile: str | None) -> None:
    """Prove the replica holds the primary's rows: chunked checksums computed on both
    sides at the same point of the replication stream (through the bridge), so
    concurrent writes cause no false mismatch.

    
    Mismatches (table, key range, both sides' counts) are printed and recorded in the
    replica's rdma_bridge.checksum_diffs; `rdma-bridge repair` fixes them. Exit code 1
    when any chunk differs.
    """
    from bridge.check.checksum import Checksummer

    checker = Checksummer(MysqlUrl.parse(primary), MysqlUrl.parse(replica), channel, chunk_time, offline=offline,
                          progress=lambda m: click.echo(m, err=True), max_rows_per_second=max_rows_per_second)
    try:
        run = checker.run(list(schemas) or None, list(tables) or None)
    finally:
        checker.close()
    if textfile:
        from bridge.check import textfile as prom

        try:
            prom.write(textfile, prom.render(channel, run))
        except OSError as exc:
            raise ConfigError(f"--textfile {textfile}: {exc.strerror or exc}") from exc
    _print_mismatches(run.mismatches)
    click.echo(f"checked {run.tables} tables, {run.chunks} chunks, {run.rows} rows in {run.seconds:.1f}s: "
               + (f"{len(run.mismatches)} chunks differ" if run.mismatches else "no differences"))
    sys.exit(1 if run.mismatches else 0)


@click.command("repair")
@check_urls
def repair(primary: str, replica: str, channel: str) -> None:
    """Re-copy the rows of every mismatched chunk found by `checksum` from the primary
    through the bridge (at the same point of the stream), then check them again.
    The primary's rows are only read. Exit code 1 if a chunk still differs."""
    from bridge.check.repair import Repairer

    repairer = Repairer(MysqlUrl.parse(primary), MysqlUrl.parse(replica), channel,
                        progress=lambda m: click.echo(m, err=True))
    try:
        repaired, recheck = repairer.run()
    finally:
        repairer.close()
    if recheck is None:
        click.echo("nothing to repair")
        return
    _print_mismatches(recheck.mismatches)
    click.echo(f"repaired {repaired} chunks; re-check: "
               + (f"{len(recheck.mismatches)} still differ" if recheck.mismatches else "clean"))
    sys.exit(1 if recheck.mismatches else 0)


# --- operating a stopped replica side -----------------------------------------

REPLICA_ADDRESS = click.option("--replica", "replica", required=True, callback=hostport_param, metavar="HOST:PORT",
                               help="The replica side's --listen address.")


@click.command("resume")
@REPLICA_ADDRESS
@SECRET_FILE
@tls_options
def resume(replica, secret_file: str | None, tls) -> None:
    """Apply again after applying stopped on an error (once its cause is fixed).

    The transaction it stopped at is retried first; the answer says whether it went
    through or stopped again, and why. `rdma-bridge status` shows where it stopped.

    \b
    Example:
      rdma-bridge resume --replica 127.0.0.1:7400
    """
    from bridge.node import admin

    click.echo(admin.request(replica, read_secret(secret_file), {"type": "resume"}, tls=tls))


@click.command("skip")
@click.option("--gtid", required=True, help="The GTID of the transaction applying stopped at (status shows it).")
@REPLICA_ADDRESS
@SECRET_FILE
@tls_options
def skip(gtid: str, replica, secret_file: str | None, tls) -> None:
    """Skip the one transaction applying stopped at, and apply on.

    Only that transaction can be skipped. Its changes are not applied; the position
    moves past it, and rdma_bridge.skipped on the replica records the GTID, the
    error, the time and who skipped it. Use it when the replica already holds the
    change (applied there by hand); otherwise the replica now differs from the
    primary (`rdma-bridge checksum` finds where).

    \b
    Example:
      rdma-bridge skip --gtid 0-1-4711 --replica 127.0.0.1:7400
    """
    import getpass
    import socket

    from bridge.node import admin

    by = f"{getpass.getuser()}@{socket.gethostname()}"
    click.echo(admin.request(replica, read_secret(secret_file), {"type": "skip", "gtid": gtid, "by": by},
                             tls=tls))


# --- verification and demo -------------------------------------------------

@click.command("verify")
@renamed_option("--source", "--primary", "primary", new_env="RDMA_BRIDGE_CHECK_SOURCE",
                old_env="RDMA_BRIDGE_VERIFY_PRIMARY", required=True, metavar="URL",
                help="The primary server (also $RDMA_BRIDGE_CHECK_SOURCE, as for checksum); its account needs "
                     "SELECT.")
@renamed_option("--target", "--replica", "replica", new_env="RDMA_BRIDGE_CHECK_TARGET",
                old_env="RDMA_BRIDGE_VERIFY_REPLICA", required=True, metavar="URL",
                help="The replica server (also $RDMA_BRIDGE_CHECK_TARGET); its account needs SELECT.")
@click.option("--schema", "schemas", multiple=True, help="Schemas to compare (default: all user schemas).")
@click.option("--channel", default="default", show_default=True,
              help="Compare what this channel replicates (its --include/--exclude/--rename-schema, recorded on "
                   "the replica); a replica without that channel's record: every table.")
def verify(primary: str, replica: str, schemas: tuple[str, ...], channel: str) -> None:
    """Compare both databases row by row; exit 1 on any difference."""
    from bridge.check.checksum import channel_filter, connect
    from bridge.check.compare import compare_databases

    replica_url = MysqlUrl.parse(replica)
    conn = connect(replica_url, "replica")
    try:
        rules = channel_filter(conn, channel)
    finally:
        conn.close()
    if not rules.everything:
        click.echo(f"channel {channel!r} replicates {rules.describe()}", err=True)
    result = compare_databases(MysqlUrl.parse(primary), replica_url, list(schemas) or None, rules)
    for name, (a, b) in result.digests.items():
        if not (a.present and b.present):
            click.echo(f"DIFF {name:40} only on the {'primary' if a.present else 'replica'}, "
                       f"{(a if a.present else b).rows} rows")
            continue
        mark = "ok" if a == b else "DIFF"
        click.echo(f"{mark:4} {name:40} rows {a.rows:>8} / {b.rows:<8} sha256 {a.sha256[:12]} / {b.sha256[:12]}")
    result.raise_if_different()
    click.echo(f"match: {len(result.digests)} tables identical")


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
    import time

    from bridge.lab.workload import MixedWorkload, connect, create_schema

    conn = connect(MysqlUrl.parse(target, "RDMA_BRIDGE_WORKLOAD_PASSWORD"))
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
def demo(state_dir: str, transactions: int, transport: str, probes: int, flavor: str | None) -> None:
    """Sandbox up, both bridges started, a mixed workload, then a verified match."""
    from bridge.lab.demo import run_demo

    if flavor not in (None, LOCAL) and state_dir == DEFAULT_STATE_DIR:
        state_dir = f"{DEFAULT_STATE_DIR}-{flavor}"
    ok = run_demo(state_dir, transactions, transport, probes, echo=click.echo, progressbar=click.progressbar,
                  flavor=flavor)
    sys.exit(0 if ok else 1)
