"""Why the replica's server refused a row event, when it does not say (pure).

A row event the replica's table cannot take (a column of another type, length or
character set than the primary's) fails inside a ``BINLOG`` statement as error 1105
"Unknown error", where a native replica would say "Column 1 of table 't' cannot be
converted from type 'varchar(64)' to type 'varchar(256)'" (MariaDB and MySQL,
``Table_map_log_event`` compatibility checks). ``explain`` compares what the TABLE_MAP
says of each column with the replica's own definition (information_schema.COLUMNS) and
names what differs, so an apply stop says what a native replica's Last_SQL_Error would.
"""

from __future__ import annotations

from bridge.wire import tablemap as tm

# information_schema DATA_TYPE -> the binlog column types it is logged as
_LOGGED_AS = {
    "tinyint": {tm.TINY}, "smallint": {tm.SHORT}, "mediumint": {tm.INT24}, "int": {tm.LONG},
    "bigint": {tm.LONGLONG}, "float": {tm.FLOAT}, "double": {tm.DOUBLE}, "decimal": {tm.NEWDECIMAL},
    "date": {tm.DATE, tm.NEWDATE}, "datetime": {tm.DATETIME, tm.DATETIME2}, "timestamp": {tm.TIMESTAMP, tm.TIMESTAMP2},
    "time": {tm.TIME, tm.TIME2}, "year": {tm.YEAR}, "bit": {tm.BIT}, "varchar": {tm.VARCHAR, tm.VAR_STRING},
    "varbinary": {tm.VARCHAR, tm.VAR_STRING}, "char": {tm.STRING}, "binary": {tm.STRING}, "enum": {tm.ENUM},
    "set": {tm.SET}, "json": {tm.JSON, tm.BLOB}, "vector": {tm.VECTOR},
    **{t: {tm.BLOB} for t in ("tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob",
                              "longblob")},
}
# a BLOB-like column's length prefix in bytes, by its DATA_TYPE
_BLOB_PREFIX = {"tinytext": 1, "tinyblob": 1, "text": 2, "blob": 2, "mediumtext": 3, "mediumblob": 3, "longtext": 4,
                "longblob": 4, "json": 4}
_NAMES = {getattr(tm, name): name for name in (
    "DECIMAL", "TINY", "SHORT", "LONG", "FLOAT", "DOUBLE", "NULL", "TIMESTAMP", "LONGLONG", "INT24", "DATE", "TIME",
    "DATETIME", "YEAR", "NEWDATE", "VARCHAR", "BIT", "TIMESTAMP2", "DATETIME2", "TIME2", "VECTOR", "JSON", "NEWDECIMAL",
    "ENUM", "SET", "TINY_BLOB", "MEDIUM_BLOB", "LONG_BLOB", "BLOB", "VAR_STRING", "STRING", "GEOMETRY")}


def explain(table: tm.TableMap, columns: list[tuple], charsets: dict[int, str]) -> list[str]:
    """What differs between the primary's ``table`` (a TABLE_MAP) and the replica's
    ``columns`` (name, DATA_TYPE, CHARACTER_OCTET_LENGTH, CHARACTER_SET_NAME, in
    ordinal order); ``charsets``: collation id -> character set name, as the replica
    numbers them. Empty when nothing the TABLE_MAP shows differs."""
    name = f"{table.schema}.{table.table}"
    if not columns:
        return [f"{name} does not exist on the replica"]
    if len(columns) != len(table.types):
        return [f"{name} has {len(table.types)} columns on the primary, {len(columns)} on the replica"]
    out = []
    for i, (column, data_type, octets, charset) in enumerate(columns):
        logged = table.names[i] if i < len(table.names) and table.names[i] else f"column {i + 1}"
        where = f"{name}.{column}"
        if table.names[i] and table.names[i] != column:
            out.append(f"column {i + 1} of {name} is {logged} on the primary, {column} on the replica")
            continue
        kind = str(data_type).lower()
        if kind in _LOGGED_AS and table.types[i] not in _LOGGED_AS[kind]:
            out.append(f"{where} is {_NAMES.get(table.types[i], table.types[i])} on the primary, {kind} on the "
                       "replica")
            continue
        primary_charset = charsets.get(table.collations[i]) if table.collations[i] is not None else None
        if primary_charset and charset and primary_charset != str(charset).lower():
            out.append(f"{where} is in character set {primary_charset} on the primary, {charset} on the replica")
        elif table.types[i] in (tm.VARCHAR, tm.VAR_STRING) and octets is not None and \
                table.sizes[i] != (-1 if int(octets) < 256 else -2):
            out.append(f"{where} holds up to {int(octets)} bytes on the replica, "
                       f"{'fewer than 256' if table.sizes[i] == -1 else '256 or more'} on the primary")
        elif table.types[i] == tm.BLOB and kind in _BLOB_PREFIX and -table.sizes[i] != _BLOB_PREFIX[kind]:
            out.append(f"{where} is {kind} on the replica, a {-table.sizes[i]}-byte length "
                       f"{'TEXT/BLOB' if -table.sizes[i] == 2 else 'TINY/MEDIUM/LONG TEXT or BLOB'} on the primary")
    return out
