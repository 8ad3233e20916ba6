"""SQL names (pure): the bridge's own schema and tables, one definition for every
module that reads or writes them (sql/bridge_schema.sql creates them), and quoting
of identifiers for the applier and the checksum."""

from __future__ import annotations

SCHEMA = "rdma_bridge"  # on both servers; never replicated into, never compared
META = f"{SCHEMA}.bridge_meta"  # replica: each channel's position, epoch, pending DDL
HEARTBEAT = f"{SCHEMA}.heartbeat"  # primary: written by the primary side, replicated like user rows
SKIPPED = f"{SCHEMA}.skipped"  # replica: transactions an operator skipped
REPAIRS = f"{SCHEMA}.repairs"  # primary: repair markers, replicated to the replica side
PROBE = f"{SCHEMA}.bridge_probe"  # replica: the binlog apply mode's capability probe
CLONE_STATE = f"{SCHEMA}.clone_state"  # replica: how far `rdma-bridge clone` got, per table
CHANNEL_FILTER = f"{SCHEMA}.channel_filter"  # replica: what each channel replicates (bridge.filter)
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys", SCHEMA)


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_name(schema: str, table: str) -> str:
    return f"{quote_name(schema)}.{quote_name(table)}"


def as_str(value) -> str:
    """A name or definition read from information_schema or SHOW CREATE: bytes where the
    server marks the column binary (utf8mb4 on the wire)."""
    return value.decode() if isinstance(value, bytes) else value
