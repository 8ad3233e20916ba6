"""Commands that check before and after: doctor (this host and the servers, before a
start), tls-certs (the certificates doctor checks), checksum and repair (the replica's
rows in-band), verify (both databases row by row)."""

from __future__ import annotations

import sys

import click

from bridge.cli.options import (
    RING_BYTES,
    TRANSPORT,
    rdma_options,
    renamed_option,
    tls_options,
)
from bridge.config import PASSWORD_ENV, MysqlUrl
from bridge.errors import ConfigError


@click.command("doctor")
@click.option("--transport", type=TRANSPORT, default="tcp", show_default=True,
              help="The transport you plan to use: with rdma, a missing device or memlock limit is a failure.")
@RING_BYTES
@rdma_options
@click.option("--local-address", default="", metavar="IP",
              help="With rdma: this side's address on the control connection (the replica side's --listen host, "
                   "or this host's address toward the replica side): the GID a start would take is the one of "
                   "this address.")
@click.option("--source", envvar="RDMA_BRIDGE_SOURCE", default=None, metavar="URL",
              help="Also check the primary: binlog settings, server ids, the reader's grants.")
@click.option("--target", envvar="RDMA_BRIDGE_TARGET", default=None, metavar="URL",
              help="Also check the replica: the applier's grants.")
@click.option("--server-id", type=int, default=4242, show_default=True,
              help="The start-primary --server-id to check: it must differ from every server id the primary "
                   "and its other replicas use.")
@click.option("--apply-mode", type=click.Choice(["auto", "binlog", "sql", "relay"]), default="auto",
              show_default=True, help="The start-replica --apply-mode to check the replica user's privileges for.")
@tls_options
@click.option("--clone-source", envvar="RDMA_BRIDGE_CLONE_SOURCE", default=None, metavar="URL",
              help="Also check what `rdma-bridge clone --source URL` needs: its account's privileges, tables a "
                   "consistent snapshot covers, binlogs kept longer than the copy takes (the password alone: "
                   "$RDMA_BRIDGE_CLONE_SOURCE_PASSWORD).")
@click.option("--clone-schema", "clone_schemas", multiple=True, metavar="NAME",
              help="The schemas clone will copy (default: every user schema).")
@click.option("--clone-parallel", type=click.IntRange(1, 32), default=1, show_default=True,
              help="The clone --parallel you plan (above 1 needs RELOAD).")
def doctor(transport: str, ring_bytes: int, rdma, local_address: str, source: str | None, target: str | None,
           server_id: int, apply_mode: str, tls, clone_source: str | None, clone_schemas: tuple[str, ...],
           clone_parallel: int) -> None:
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

    found = checks.rdma_checks(transport, ring_bytes, rdma=rdma, local_address=local_address)
    if tls is not None:
        found += checks.tls_checks(tls)
    if clone_source:
        found += checks.clone_checks(MysqlUrl.parse(clone_source, PASSWORD_ENV["clone_source"]), list(clone_schemas),
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


CHECK_URLS = [
    renamed_option("--source", "--primary", "primary", new_env="RDMA_BRIDGE_CHECK_SOURCE",
                   old_env="RDMA_BRIDGE_CHECK_PRIMARY", required=True, metavar="URL",
                   help="The primary server, as a user that reads every table, may SET binlog_format (BINLOG ADMIN) "
                        "and write rdma_bridge.*; also from $RDMA_BRIDGE_CHECK_SOURCE (keeps the password out of "
                        "ps), or the password alone from $RDMA_BRIDGE_CHECK_SOURCE_PASSWORD."),
    renamed_option("--target", "--replica", "replica", new_env="RDMA_BRIDGE_CHECK_TARGET",
                   old_env="RDMA_BRIDGE_CHECK_REPLICA", required=True, metavar="URL",
                   help="The replica server, as a user that reads every table and writes rdma_bridge.*; also from "
                        "$RDMA_BRIDGE_CHECK_TARGET (the password alone: $RDMA_BRIDGE_CHECK_TARGET_PASSWORD)."),
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

    checker = Checksummer(MysqlUrl.parse(primary, PASSWORD_ENV["check_source"]),
                          MysqlUrl.parse(replica, PASSWORD_ENV["check_target"]), channel, chunk_time, offline=offline,
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

    repairer = Repairer(MysqlUrl.parse(primary, PASSWORD_ENV["check_source"]),
                        MysqlUrl.parse(replica, PASSWORD_ENV["check_target"]), channel,
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

    replica_url = MysqlUrl.parse(replica, PASSWORD_ENV["check_target"])
    conn = connect(replica_url, "replica")
    try:
        rules = channel_filter(conn, channel)
    finally:
        conn.close()
    if not rules.everything:
        click.echo(f"channel {channel!r} replicates {rules.describe()}", err=True)
    primary_url = MysqlUrl.parse(primary, PASSWORD_ENV["check_source"])
    result = compare_databases(primary_url, replica_url, list(schemas) or None, rules)
    for name, (a, b) in result.digests.items():
        if not (a.present and b.present):
            click.echo(f"DIFF {name:40} only on the {'primary' if a.present else 'replica'}, "
                       f"{(a if a.present else b).rows} rows")
            continue
        mark = "ok" if a == b else "DIFF"
        click.echo(f"{mark:4} {name:40} rows {a.rows:>8} / {b.rows:<8} sha256 {a.sha256[:12]} / {b.sha256[:12]}")
    result.raise_if_different()
    click.echo(f"match: {len(result.digests)} tables identical")
