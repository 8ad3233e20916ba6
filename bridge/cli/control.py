"""Commands that watch and operate a running bridge: status, report (both read the
ends' /status), resume and skip (a replica side whose applying stopped)."""

from __future__ import annotations

import json
import sys

import click

from bridge.cli.options import (
    PRIMARY_METRICS_PORT,
    REPLICA_METRICS_PORT,
    SECRET_FILE,
    hostport_param,
    renamed_option,
    tls_options,
)
from bridge.config import read_secret
from bridge.errors import ConfigError

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
