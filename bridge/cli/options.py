"""The command group and the options its commands share: errors printed as one line
naming the thing at fault, URLs, addresses, the ring size, metrics and the secret."""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import traceback

import click

from bridge.config import DEFAULT_RING_BYTES, SECRET_ENV, RdmaOptions, TlsFiles, parse_hostport, parse_replica
from bridge.errors import EXIT_ERROR, BridgeError
from bridge.filter import Filter
from bridge.lab.sandbox import DEFAULT_STATE_DIR
from bridge.ring.layout import check_ring_bytes
from bridge.transport import TRANSPORTS

TRANSPORT = click.Choice(TRANSPORTS)
log = logging.getLogger("bridge")


class BridgeGroup(click.Group):
    """Every failure a user can meet is one line naming the thing at fault (and the fix);
    --debug (or RDMA_BRIDGE_DEBUG=1) adds the traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BridgeError as exc:
            _fail(ctx, f"rdma-bridge: error: {exc}", exc.exit_status)
        except OSError as exc:
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            _fail(ctx, f"rdma-bridge: error: {exc.strerror or exc}{where}")
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug: still one line, the traceback with --debug
            _fail(ctx, f"rdma-bridge: unexpected error: {type(exc).__name__}: {exc} (a bug: run again with --debug "
                       "for the traceback, and report it)")


def _fail(ctx, line: str, status: int = EXIT_ERROR) -> None:
    if ctx.params.get("debug") or os.environ.get("RDMA_BRIDGE_DEBUG") == "1":
        traceback.print_exc()
    click.echo(line, err=True)
    sys.exit(status)


def _show_version(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from bridge import __version__
    from bridge.ring.layout import RING_LAYOUT_VERSION
    from bridge.wire import control, native

    click.echo(f"rdma-bridge {__version__} (wire protocol version {control.PROTOCOL_VERSION}, ring layout "
               f"{RING_LAYOUT_VERSION})\n{native.described()}")
    ctx.exit()


@click.group(cls=BridgeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_show_version,
              help="Show the release, the wire protocol version (both ends must run the same), and which parts run "
                   "compiled.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="How much the log says: info tells every start, session, reconnect and progress line; "
                   "debug adds each decision of the hot paths; warning only what needs a person.")
@click.option("--debug", is_flag=True, help="Show the traceback of an error (else one line says what failed).")
def main(log_level: str, debug: bool) -> None:
    """Replicate a MySQL/MariaDB primary into a replica through a ring buffer in the
    replica host's memory (RDMA WRITE, shared memory or TCP).

    \b
    Quick try on this machine:
      rdma-bridge sandbox up --json          # local MariaDB primary + replica
      rdma-bridge demo                       # both bridges, a workload, a verified match

    \b
    Exit status: 0 done; 1 an error (one line on stderr says which), or a
    difference or a failed check that checksum, verify or doctor reports; 2 a bad
    command line; 78 a setting that cannot work until it is changed (a bad URL,
    option or transport: the systemd units do not restart on 2 or 78).
    """
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# --- sandbox ---------------------------------------------------------------


STATE_DIR = click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True,
                         type=click.Path(file_okay=False), help="Where the servers keep their data.")


def ring_bytes_param(_ctx, _param, value: int) -> int:
    try:
        return check_ring_bytes(value)
    except BridgeError as exc:
        raise click.BadParameter(str(exc)) from exc


def hostport_param(_ctx, _param, value: str) -> tuple[str, int]:
    try:
        return parse_hostport(value)
    except BridgeError as exc:
        raise click.BadParameter(str(exc)) from exc


def replicas_param(_ctx, _param, values: tuple[str, ...]) -> tuple[tuple[tuple[str, int], str], ...]:
    """A repeatable [TRANSPORT://]HOST:PORT option: each parsed (the address, the transport
    named or ""), no address twice."""
    out: list[tuple[tuple[str, int], str]] = []
    for value in values:
        try:
            address, transport = parse_replica(value, TRANSPORTS)
        except BridgeError as exc:
            raise click.BadParameter(str(exc)) from exc
        if any(address == seen for seen, _ in out):
            raise click.BadParameter(f"{value} is given twice: each replica side once")
        out.append((address, transport))
    return tuple(out)


def heartbeat_table_param(_ctx, _param, value: str | None) -> str | None:
    """SCHEMA.TABLE: two plain identifiers (they go into statements on the primary)."""
    if value is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9_$]+\.[A-Za-z0-9_$]+", value):
        raise click.BadParameter(f"{value!r} is not SCHEMA.TABLE (letters, digits, _ and $), e.g. "
                                 "rdma_bridge.pt_heartbeat")
    return value


def _metrics_address(_ctx, _param, value: str) -> tuple[str, int] | None:
    if value.lower() in ("off", "none", ""):
        return None
    try:
        return parse_hostport(value)
    except BridgeError as exc:
        raise click.BadParameter(str(exc)) from exc


def metrics_option(default_port: int):
    return click.option("--metrics", default=f"127.0.0.1:{default_port}", show_default=True, callback=_metrics_address,
                        metavar="HOST:PORT|off",
                        help="Serve Prometheus /metrics and a JSON /status here (read by `rdma-bridge status`).")


PRIMARY_METRICS_PORT, REPLICA_METRICS_PORT = 9401, 9402
SECRET_FILE = click.option(
    "--secret-file", type=click.Path(dir_okay=False), default=None,
    help=f"File whose first line is the control channel's shared secret (else ${SECRET_ENV}). Both sides "
         "prove it to each other; required when the replica listens beyond loopback.")
PIN_NEAR_NIC = click.option(
    "--pin-near-nic", is_flag=True,
    help="Run on the CPUs of the RDMA NIC's NUMA node (a poller on the far NUMA node pays about twice the memory "
         "latency). Said in the log; no effect without NUMA information.")
REALTIME = click.option(
    "--realtime-priority", type=click.IntRange(0, 99), default=0, show_default=True, metavar="PRIORITY",
    help="Run every thread of this process under SCHED_FIFO at PRIORITY (1-99; 0: normal scheduling). Woken by "
         "the next event or message it runs at once, not behind the servers and clients for a CPU: a semi-sync "
         "ACK waits for one such wakeup over shm and three over tcp, and on a busy host each can take longer "
         "than the primary's timeout. The threads sleep between transactions, so the servers lose only the "
         "bridge's own work. Needs root or CAP_SYS_NICE (systemd: CPUSchedulingPolicy=fifo); refused, it says "
         "so in the log and runs at normal priority.")
TRANSPORT_OPTION = click.option("--transport", type=TRANSPORT, default="shm", show_default=True,
                                help="How frames reach the replica's ring: shm (one host), tcp, rdma.")
RING_BYTES = click.option("--ring-bytes", type=int, default=DEFAULT_RING_BYTES, show_default=True,
                          callback=ring_bytes_param, help="Ring data area size, a power of two.")


_TLS_FILE = click.Path(dir_okay=False)
_TLS_OPTIONS = (
    click.option("--tls-cert", type=_TLS_FILE, envvar="RDMA_BRIDGE_TLS_CERT", metavar="PEM",
                 help="This end's certificate. With --tls-key and --tls-ca the control and data connections run over "
                      "TLS 1.2+ and each end verifies the other's certificate (also $RDMA_BRIDGE_TLS_CERT)."),
    click.option("--tls-key", type=_TLS_FILE, envvar="RDMA_BRIDGE_TLS_KEY", metavar="PEM",
                 help="The certificate's private key; refused if every user may read it (also $RDMA_BRIDGE_TLS_KEY)."),
    click.option("--tls-ca", type=_TLS_FILE, envvar="RDMA_BRIDGE_TLS_CA", metavar="PEM",
                 help="The CA that issued the other end's certificate; the primary side also checks that the replica "
                      "side's certificate names the host it dials (also $RDMA_BRIDGE_TLS_CA). `rdma-bridge tls-certs` "
                      "makes a first set."),
)


def tls_options(command):
    """--tls-cert, --tls-key, --tls-ca: all three or none; the command gets ``tls``
    (TlsFiles, or None for plain TCP)."""
    @functools.wraps(command)
    def with_tls(*args, tls_cert: str | None, tls_key: str | None, tls_ca: str | None, **kwargs):
        given = [f for f in (tls_cert, tls_key, tls_ca) if f]
        if given and len(given) < 3:
            raise click.UsageError("--tls-cert, --tls-key and --tls-ca go together (one end's certificate, its key, "
                                   "and the CA that issued the other end's)")
        return command(*args, tls=TlsFiles(tls_cert, tls_key, tls_ca) if given else None, **kwargs)

    for option in reversed(_TLS_OPTIONS):
        with_tls = option(with_tls)
    return with_tls


_RDMA_OPTIONS = (
    click.option("--rdma-device", metavar="NAME",
                 help="rdma: the RDMA device (`ibv_devices` lists them). Default: the one with a GID of this side's "
                      "address on the control connection (the primary side's end of it; the replica side's "
                      "--listen address), else the first."),
    click.option("--rdma-port", type=click.IntRange(min=1), metavar="N",
                 help="rdma: the device's port. Default: the port of the GID chosen."),
    click.option("--gid-index", type=click.IntRange(min=0), metavar="N",
                 help="rdma: the GID (`show_gids`, `ibv_devinfo -v`). Default: the RoCE v2 GID of the address the "
                      "control connection runs over, so packets leave on the netdev (and VLAN) that address is "
                      "on and route like it; a link-local fe80:: GID is never chosen while a routable one exists."),
    click.option("--rdma-traffic-class", type=click.IntRange(0, 255), metavar="TC",
                 help="rdma: the IP traffic class of the RoCE packets: DSCP << 2 (the common lossless class, "
                      "DSCP 26, is 104). The replica side marks its acknowledgements the same unless it is given "
                      "its own. Default 0: the switches' default class, often lossy."),
    click.option("--rdma-sl", type=click.IntRange(0, 15), metavar="SL",
                 help="rdma: the service level (RoCE over a VLAN: its 802.1p priority; InfiniBand: the virtual lane "
                      "by the SL-to-VL table). The replica side uses the primary side's unless given its own. "
                      "Default 0."),
)


def rdma_options(command):
    """--rdma-device, --rdma-port, --gid-index, --rdma-traffic-class, --rdma-sl: the command
    gets ``rdma`` (RdmaOptions)."""
    @functools.wraps(command)
    def with_rdma(*args, rdma_device: str | None, rdma_port: int | None, gid_index: int | None,
                  rdma_traffic_class: int | None, rdma_sl: int | None, **kwargs):
        return command(*args, rdma=RdmaOptions(rdma_device, rdma_port, gid_index, rdma_traffic_class, rdma_sl),
                       **kwargs)

    for option in reversed(_RDMA_OPTIONS):
        with_rdma = option(with_rdma)
    return with_rdma


_FILTER_OPTIONS = (
    click.option("--include", multiple=True, metavar="PATTERN",
                 help="Replicate only tables matching PATTERN (repeatable): schema or schema.table, wildcards * and "
                      "? allowed, e.g. shop or 'shop.order*'. Default: every table."),
    click.option("--exclude", multiple=True, metavar="PATTERN",
                 help="Do not replicate tables matching PATTERN (repeatable; wins over --include), e.g. "
                      "'shop.audit_*'."),
    click.option("--rename-schema", multiple=True, metavar="FROM=TO",
                 help="Replicate the primary's schema FROM into schema TO on the replica (repeatable). Patterns "
                      "name the primary's schemas."),
)


def filter_options(command):
    """--include, --exclude, --rename-schema: the command gets ``rules`` (a Filter, or
    None when none of them is given)."""
    @functools.wraps(command)
    def with_filter(*args, include: tuple, exclude: tuple, rename_schema: tuple, **kwargs):
        given = include or exclude or rename_schema
        return command(*args, rules=Filter.parse(include, exclude, rename_schema) if given else None, **kwargs)

    for option in reversed(_FILTER_OPTIONS):
        with_filter = option(with_filter)
    return with_filter


class RequiredInHelp(click.Option):
    """An option the command checks for itself (its former spelling may stand in for it,
    so click may not require it), shown as [required] in --help all the same."""

    def get_help_record(self, ctx):
        self.required = True
        try:
            return super().get_help_record(ctx)
        finally:
            self.required = False


def renamed_option(new: str, old: str, dest: str, *, new_env: str | None = None, old_env: str | None = None,
                   required: bool = False, default=None, **kwargs):
    """``new`` as an option (with ``new_env``), and its former spelling ``old`` (and
    ``old_env``) still taken for one more release: hidden from --help, said to be
    deprecated on stderr, the new one winning where both are given."""
    def decorate(fn):
        @functools.wraps(fn)
        def run(*args, **values):
            given_old = values.pop(f"{dest}_old_spelling")
            ctx = click.get_current_context()
            if given_old is not None:
                source = ctx.get_parameter_source(f"{dest}_old_spelling")
                said = f"${old_env}" if source is click.core.ParameterSource.ENVIRONMENT else old
                now = new + (f" (or ${new_env})" if new_env else "")
                click.echo(f"rdma-bridge {ctx.info_name}: {said} is deprecated and goes in the next release: "
                           f"use {now}", err=True)
                if ctx.get_parameter_source(dest) in (None, click.core.ParameterSource.DEFAULT):
                    values[dest] = given_old
            if required and values.get(dest) is None:
                raise click.UsageError(f"Missing option '{new}'" + (f" (or ${new_env})" if new_env else "") + ".")
            return fn(*args, **values)

        run = click.option(old, f"{dest}_old_spelling", hidden=True, envvar=old_env, default=None,
                           callback=kwargs.get("callback"))(run)
        return click.option(new, dest, envvar=new_env, default=default,
                            cls=RequiredInHelp if required else click.Option, **kwargs)(run)
    return decorate
