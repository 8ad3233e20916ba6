"""SQL names (pure): the bridge's own schema and tables, one definition for every
module that reads or writes them (sql/bridge_schema.sql creates them), and quoting
of identifiers for the applier and the checksum."""

from __future__ import annotations

import hashlib
import re

SCHEMA = "rdma_bridge"  # on both servers; never replicated into, never compared
META = f"{SCHEMA}.bridge_meta"  # replica: each channel's position, epoch, pending DDL
HEARTBEAT = f"{SCHEMA}.heartbeat"  # primary: written by the primary side, replicated like user rows
SKIPPED = f"{SCHEMA}.skipped"  # replica: transactions an operator skipped
APPLY_STOPPED = f"{SCHEMA}.apply_stopped"  # replica: where each stopped channel's applying stopped
REPAIRS = f"{SCHEMA}.repairs"  # primary: repair markers, replicated (a channel's own: ``owned``)
PROBE = f"{SCHEMA}.bridge_probe"  # replica: the binlog apply mode's capability probe
CLONE_STATE = f"{SCHEMA}.clone_state"  # replica: how far `rdma-bridge clone` got, per table
CHANNEL_FILTER = f"{SCHEMA}.channel_filter"  # replica: what each channel replicates (bridge.filter)
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys", SCHEMA)


# What checksum and repair make in rdma_bridge belongs to one channel: its name ends in
# ``__`` and the channel's token, so channels that share a replica never write each
# other's rows (bridge.filter drops another channel's objects from the stream).
CHECKSUMS, CHECKSUM_DIFFS, REPAIR_MARKERS, REPAIR_COPY = "checksums", "checksum_diffs", "repairs", "repair_copy"
_PLAIN_CHANNEL = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")


def channel_token(channel: str) -> str:
    """The channel's part of its object names: its name where it is plain lowercase
    (letters, digits, single underscores, at most 40), else a hash of it."""
    if _PLAIN_CHANNEL.fullmatch(channel) and len(channel) <= 40:
        return channel
    return "h" + hashlib.sha1(channel.encode()).hexdigest()[:12]


def owned(kind: str, channel: str) -> str:
    """A channel's own table in rdma_bridge (unquoted name): ``checksums__<token>``."""
    return f"{kind}__{channel_token(channel)}"


def owner_token(table: str) -> str | None:
    """The channel token a rdma_bridge table name carries, or None (a shared table)."""
    base, sep, token = table.rpartition("__")
    return token if sep and base else None


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_name(schema: str, table: str) -> str:
    return f"{quote_name(schema)}.{quote_name(table)}"


def as_str(value) -> str:
    """A name or definition read from information_schema or SHOW CREATE: bytes where the
    server marks the column binary (utf8mb4 on the wire)."""
    return value.decode() if isinstance(value, bytes) else value
