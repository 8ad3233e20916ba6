"""`rdma-bridge clone`: copy a live primary into the replica and start a channel there."""

from __future__ import annotations

import click

from bridge.cli.nodes import server_url_option
from bridge.cli.options import filter_options
from bridge.config import PASSWORD_ENV, MysqlUrl


@click.command("clone")
@server_url_option("source", "Primary server, as a user with SELECT, SHOW VIEW, TRIGGER and EVENT on the cloned "
                             "schemas and SELECT on mysql.proc (not the reader's account, which reads no table); with "
                             "--parallel above 1 also RELOAD, for a moment's FLUSH TABLES WITH READ LOCK")
@server_url_option("target", "Replica server (the apply user of start-replica, or one with CREATE, ALTER, INSERT, "
                             "CREATE ROUTINE, TRIGGER, EVENT, CREATE VIEW, and SET USER for other definers)")
@click.option("--schema", "schemas", multiple=True, metavar="NAME",
              help="A schema to clone (repeatable; it must exist): the same as --include NAME. Default: every user "
                   "schema of the primary.")
@click.option("--channel", default="default", show_default=True,
              help="The channel start-replica / start-primary will use; clone records its start position.")
@click.option("--parallel", type=click.IntRange(1, 32), default=1, show_default=True,
              help="Tables copied at once, each over its own connection, all from one consistent moment.")
@click.option("--max-rows-per-second", type=click.FloatRange(min=0), default=0, show_default=True,
              help="Copy at most this many rows a second over all connections (0: no limit). The copy also "
                   "pauses after a batch the replica was slow to take.")
@click.option("--defer-indexes", is_flag=True,
              help="Create each table without its secondary indexes and build them once its rows are in (one "
                   "ALTER TABLE): faster for large tables with several indexes. Tables with foreign keys keep theirs.")
@click.option("--restart", is_flag=True,
              help="An earlier clone of this channel stopped before it finished: drop the schemas it created on the "
                   "replica and start over from a new snapshot. Without it, clone resumes the stopped one (the "
                   "tables it copied stay).")
@filter_options
def clone(source: str, target: str, schemas: tuple[str, ...], channel: str, parallel: int,
          max_rows_per_second: float, defer_indexes: bool, restart: bool, rules) -> None:
    """Copy a live primary into empty replica schemas, consistently with one GTID
    position, and record that position as the channel's start, so that
    start-primary streams from exactly there: no gap, no duplicate.

    \b
    Order: databases and tables; the rows (largest table first, with progress: rows,
    MB, rows/s, ETA); routines, views, triggers (after the rows, so they never fire
    for copied rows) and events (disabled on the replica, as a native replica keeps
    them); the channel's position, last. The primary keeps taking writes throughout
    (a consistent snapshot; DDL on a table being copied waits for its copy).

    \b
    Killed or failed half way, it is resumed by running it again: the tables it
    copied stay (as of its snapshot), the others are copied from a new one, and
    the channel starts at the earlier position; until the stream passes the
    later one, the replica side leaves out the changes the later tables hold.

    \b
    --include/--exclude/--rename-schema (and --schema) choose what is copied and
    are recorded with the channel: start-replica then applies only the rows and
    DDL of those tables, into the renamed schemas, and checksum/verify compare
    the same tables.
    \b
    Example:
      export RDMA_BRIDGE_SOURCE=mysql://rdma_clone:...@10.0.0.1:3306   # sql/clone_grants.sql
      export RDMA_BRIDGE_TARGET=mysql://rdma_apply:...@127.0.0.1:3306
      rdma-bridge clone --schema app1 --schema app2 --parallel 2
      rdma-bridge clone --include shop --exclude 'shop.audit_*' --rename-schema shop=shop_copy
      rdma-bridge start-replica ... & rdma-bridge start-primary ...   # no --start-gtid
    """
    from bridge.clone.run import Cloner

    def say(line: str) -> None:  # progress goes to stderr, the result to stdout
        click.echo(line, err=True)

    cloner = Cloner(MysqlUrl.parse(source, PASSWORD_ENV["source"]), MysqlUrl.parse(target, PASSWORD_ENV["target"]),
                    channel=channel, schemas=schemas, parallel=parallel, max_rows_per_second=max_rows_per_second,
                    say=say, rules=rules, defer_indexes=defer_indexes)
    result = cloner.run(restart=restart)
    kept = f" ({result.kept} more kept from the clone that stopped)" if result.kept else ""
    click.echo(f"cloned {result.tables} tables{kept}, {result.rows:,} rows, {result.bytes / 1e6:.1f} MB in "
               f"{result.seconds:.1f}s ({result.rows / max(result.seconds, 1e-6):,.0f} rows/s); channel "
               f"{channel!r} starts at {result.gtid or '(the binlog start)'}: run start-replica --channel {channel}, "
               "then start-primary (it streams from there; no --start-gtid) against that replica side")
