"""What the replica side reads out of a decoded payload besides applying it (pure).

- ``check_payload``: a frame's changes must be of the session's apply mode (raw row
  events in binlog mode, decoded rows in sql mode), and raw events need a known
  FORMAT_DESCRIPTION; anything else is the primary side breaking the contract.
- ``heartbeat_written_us``: the primary-side write time of a heartbeat row
  (bridge.source.heartbeat), for the lag stage, in either form.
"""

from __future__ import annotations

from bridge.errors import RemoteProtocolError
from bridge.model import HEARTBEAT_TABLE, Chunk, RowChange, RowEvents, Statement, Transaction
from bridge.wire import binlog, tablemap

HEARTBEAT = HEARTBEAT_TABLE


def check_payload(seq: int, item: Transaction | Chunk, mode: str, has_format: bool) -> bool:
    """Raise on a payload the session cannot apply; True once a format is known."""
    wrong = RowChange if mode == "binlog" else RowEvents
    for c in item.changes:  # no generator: once per frame
        if isinstance(c, wrong):
            raise RemoteProtocolError(f"frame seq {seq} ({item.gtid}): {wrong.__name__} in a {mode}-mode session")
    if item.format_event:
        binlog.parse_format_description(item.format_event)
        return True
    if not has_format and needs_format(item):
        raise RemoteProtocolError(f"frame seq {seq} ({item.gtid}): raw binlog events before any "
                                  "FORMAT_DESCRIPTION event in this session")
    return has_format


def rows_and_events(changes) -> tuple[int, int]:
    """(decoded rows, raw row events) of a payload's changes."""
    rows = events = 0
    for c in changes:
        if isinstance(c, RowChange):
            rows += 1
        elif isinstance(c, RowEvents):
            events += c.events
    return rows, events


def needs_format(item: Transaction | Chunk) -> bool:
    return any(isinstance(c, RowEvents) or (isinstance(c, Statement) and c.raw) for c in item.changes)


def heartbeat_rows(change, fmt: binlog.FormatDescription | None) -> list[tuple[str, str, int | None]] | None:
    """(kind, source, ts_us) of every row ``change`` writes into the heartbeat table, or
    None when it is not a heartbeat change."""
    if isinstance(change, RowChange):
        if (change.schema, change.table) != HEARTBEAT:
            return None
        image = change.after if change.after is not None else change.before
        row = dict(zip(change.columns, image))
        return [(change.kind, row.get("source"), row.get("ts_us"))]
    if not isinstance(change, RowEvents) or HEARTBEAT not in change.tables or fmt is None or \
            set(change.tables) != {HEARTBEAT}:  # the cheap test first: every change the replica applies comes here
        return None
    out = []
    for table, kind, before, after in tablemap.rows_of(change.data, fmt.checksum_bytes):
        image = after if after is not None else before
        source, ts = table.column("source"), table.column("ts_us")
        out.append((kind, tablemap.as_text(image[source], table.collations[source]),
                    tablemap.as_int(image[ts], table.unsigned[ts])))
    return out


def heartbeat_written_us(change, fmt: binlog.FormatDescription | None) -> int | None:
    """``ts_us`` of the heartbeat row ``change`` writes, or None when it is no heartbeat."""
    if isinstance(change, RowChange):
        if (change.schema, change.table) == HEARTBEAT and change.after is not None and "ts_us" in change.columns:
            return change.after[change.columns.index("ts_us")]
        return None
    if not isinstance(change, RowEvents) or change.tables != (HEARTBEAT,) or change.events != 1 or fmt is None:
        return None
    for table, _, _, after in tablemap.rows_of(change.data, fmt.checksum_bytes):
        if after is not None and "ts_us" in table.names:
            i = table.column("ts_us")
            return tablemap.as_int(after[i], table.unsigned[i])
    return None
