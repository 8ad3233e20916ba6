"""The schema objects of the cloned schemas, read from the primary and created on the
replica in dependency order: databases and tables before the rows (foreign keys off,
so tables may reference each other in any order); after the rows, routines, views
(a view over a view waits for it), triggers (created last, so that they never fire for
the copied rows) and events (disabled on the replica, as a native replica keeps them:
``DISABLE ON SLAVE``). Definers come along as SHOW CREATE gives them: creating an
object for another definer needs SET USER (or SUPER) on the replica."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import pymysql

from bridge.apply import replay
from bridge.apply.connection import apply_error
from bridge.config import MysqlUrl
from bridge.errors import ApplyError, ConfigError
from bridge.filter import EVERYTHING, Filter
from bridge.filter.sqltext import rename
from bridge.server import catalog, errorcodes
from bridge.server.flavor import Flavor
from bridge.server.sqlnames import SYSTEM_SCHEMAS, as_str, quote_name, table_name

log = logging.getLogger(__name__)
_KINDS_AFTER_ROWS = ("PROCEDURE", "FUNCTION", "VIEW", "TRIGGER", "EVENT")


@dataclass
class SchemaPlan:
    databases: dict[str, str] = field(default_factory=dict)  # name -> CREATE DATABASE
    tables: dict[tuple[str, str], str] = field(default_factory=dict)  # (db, table) -> CREATE TABLE
    # (kind, db, name, CREATE ..., the sql_mode it was created under: "" for views)
    after_rows: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    rules: Filter = EVERYTHING  # what was kept, and the replica's schema names (renames)
    trigger_tables: dict[tuple[str, str], str] = field(default_factory=dict)  # (db, trigger) -> its table

    def entries(self) -> list[tuple[str, str]]:
        """What the clone's state lists (the replica's names): tables, views, and each
        schema's other objects (table '')."""
        into = self.rules.target
        return [*((into(db), t) for db, t in self.tables), *((into(db), "") for db in self.databases),
                *((into(db), name) for kind, db, name, _, _ in self.after_rows if kind == "VIEW")]

    def without_triggers(self) -> tuple[SchemaPlan, list[str]]:
        """(this plan without its triggers, their names as db.trigger)."""
        left_out = [f"{db}.{name}" for kind, db, name, _, _ in self.after_rows if kind == "TRIGGER"]
        return dataclasses.replace(self, after_rows=[o for o in self.after_rows if o[0] != "TRIGGER"]), left_out

    def only_added(self, base: Filter) -> SchemaPlan:
        """The part a channel that replicates ``base`` lacks: the tables and views it
        leaves out, their triggers, and the schemas it leaves out whole (the database,
        its routines and events)."""
        new = {db for db in self.databases if not base.keeps_schema(db)}
        tables = {key: create for key, create in self.tables.items() if not base.keeps(*key)}
        after = [o for o in self.after_rows if o[1] in new or (o[0] == "VIEW" and not base.keeps(o[1], o[2]))
                 or (o[0] == "TRIGGER" and (o[1], self.trigger_tables[(o[1], o[2])]) in tables)]
        return SchemaPlan({db: self.databases[db] for db in self.databases if db in new}, tables, after, self.rules,
                          self.trigger_tables)


def user_schemas(conn: pymysql.Connection) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME NOT IN %s ORDER BY 1",
                    (SYSTEM_SCHEMAS,))
        return [row[0] for row in cur.fetchall()]


def read_schema(conn: pymysql.Connection, schemas: list[str], rules: Filter = EVERYTHING) -> SchemaPlan:
    """The objects of ``schemas`` the filter keeps: tables and views by name, triggers
    by their table, routines and events with their schema. Names as on the primary."""
    plan = SchemaPlan(rules=rules)
    with conn.cursor() as cur:
        for db in schemas:
            cur.execute(f"SHOW CREATE DATABASE {quote_name(db)}")
            plan.databases[db] = cur.fetchone()[1]
            cur.execute("SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                        "ORDER BY 1", (db,))
            for name, kind in cur.fetchall():
                if not rules.keeps(db, name):
                    continue
                if kind == "VIEW":
                    plan.after_rows.append(("VIEW", db, name, _show(cur, "VIEW", db, name, 1)[0], ""))
                elif kind in ("BASE TABLE", "SYSTEM VERSIONED"):
                    plan.tables[(db, name)] = _show(cur, "TABLE", db, name, 1)[0]
            for kind, query, column in (
                    ("PROCEDURE", "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA=%s "
                                  "AND ROUTINE_TYPE='PROCEDURE'", 2),
                    ("FUNCTION", "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA=%s "
                                 "AND ROUTINE_TYPE='FUNCTION'", 2),
                    ("TRIGGER", "SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS WHERE "
                                "TRIGGER_SCHEMA=%s ORDER BY EVENT_OBJECT_TABLE, ACTION_TIMING, EVENT_MANIPULATION, "
                                "ACTION_ORDER", 2),
                    ("EVENT", "SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA=%s", 3)):
                cur.execute(query, (db,))
                for name, *table in cur.fetchall():
                    if table and (db, table[0]) not in plan.tables:
                        continue  # a trigger of a table the filter leaves out
                    if table:
                        plan.trigger_tables[(db, name)] = table[0]
                    plan.after_rows.append((kind, db, name, *_show(cur, kind, db, name, column)))
    plan.after_rows.sort(key=lambda o: _KINDS_AFTER_ROWS.index(o[0]))  # stable: listing order within a kind
    return plan


def _show(cur, kind: str, db: str, name: str, column: int) -> tuple[str, str]:
    """(the CREATE statement, the sql_mode it was made under: column 1 of routines,
    triggers and events)."""
    cur.execute(f"SHOW CREATE {kind} {table_name(db, name)}")
    row = cur.fetchone()
    text = row[column]
    if text is None:
        raise ConfigError(f"clone: SHOW CREATE {kind} {db}.{name} shows no definition: the primary's user needs "
                          "SHOW VIEW / SELECT on mysql.proc (or to be the definer) to read it")
    mode = row[1] if column > 1 else ""
    return as_str(text), as_str(mode)



def refuse_non_empty(conn: pymysql.Connection, plan: SchemaPlan, url: MysqlUrl) -> None:
    """Clone writes only into schemas the replica does not hold (or holds empty), and
    tables it does not have."""
    into = plan.rules.target
    targets = tuple(into(db) for db in plan.databases) or ("",)
    tables = tuple(f"{into(db)}.{t}" for db, t in plan.tables) or ("",)
    with conn.cursor() as cur:
        cur.execute("SELECT CONCAT(TABLE_SCHEMA, '.', TABLE_NAME) AS n FROM information_schema.TABLES WHERE "
                    "TABLE_SCHEMA IN %s OR CONCAT(TABLE_SCHEMA, '.', TABLE_NAME) IN %s UNION SELECT "
                    "CONCAT(ROUTINE_SCHEMA, '.', ROUTINE_NAME) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA "
                    "IN %s ORDER BY 1 LIMIT 6", (targets, tables, targets))
        held = [row[0] for row in cur.fetchall()]
    if held:
        more = ", ..." if len(held) > 5 else ""
        raise ConfigError(f"clone: the replica {url} already holds {', '.join(held[:5])}{more}: clone copies into "
                          "schemas and tables the replica does not have; drop them there first (or choose --schema, "
                          "--include, --exclude)")


def _renamed(text: str, rules: Filter) -> str:
    """A definition with the renamed schemas' qualified names rewritten (bridge.filter.sqltext)."""
    return rename(text.encode("utf-8"), dict(rules.renames)).decode("utf-8") if rules.renames else text


_SECONDARY = ("  KEY ", "  UNIQUE KEY ", "  FULLTEXT KEY ", "  SPATIAL KEY ", "  VECTOR KEY ")


def without_secondary_indexes(create: str) -> tuple[str, list[str]]:
    """A SHOW CREATE TABLE text without its secondary indexes, and those indexes (each an
    ``ALTER TABLE ... ADD`` clause), to build once the rows are in. A table with foreign
    keys keeps them all (the server would make an index of its own for a key's columns)."""
    lines = create.split("\n")
    if any("FOREIGN KEY" in line for line in lines):
        return create, []
    kept = [line for line in lines if not line.startswith(_SECONDARY)]
    deferred = [line.strip().rstrip(",") for line in lines if line.startswith(_SECONDARY)]
    if not deferred:
        return create, []
    last = max(i for i, line in enumerate(kept) if line.startswith("  "))  # the last column or key before ")"
    kept[last] = kept[last].rstrip(",")
    return "\n".join(kept), deferred


def create_before_rows(conn: pymysql.Connection, plan: SchemaPlan, url: MysqlUrl,
                       tables: set[tuple[str, str]] | None = None, defer_indexes: bool = False) -> dict:
    """Every database, and the tables (``tables``: only these, by the primary's names);
    ``defer_indexes``: without their secondary indexes, returned by table (the primary's
    names) as ALTER TABLE clauses to add once the rows are in."""
    rules, deferred = plan.rules, {}
    for db, create in plan.databases.items():
        db = rules.target(db)
        _run(conn, _renamed(create, rules).replace("CREATE DATABASE", "CREATE DATABASE IF NOT EXISTS", 1),
             f"database {db}", url)
    for (db, name), create in plan.tables.items():
        if tables is not None and (db, name) not in tables:
            continue
        into = rules.target(db)
        create = _renamed(create, rules)
        if defer_indexes:
            create, indexes = without_secondary_indexes(create)
            if indexes:
                deferred[(db, name)] = indexes
        _run(conn, f"USE {quote_name(into)}", f"database {into}", url)
        _run(conn, create, f"table {into}.{name}", url)
    return deferred


def add_indexes(conn: pymysql.Connection, table: str, indexes: list[str], url: MysqlUrl) -> None:
    """The secondary indexes ``create_before_rows`` deferred, in one ALTER TABLE."""
    _run(conn, f"ALTER TABLE {table} " + ", ".join(f"ADD {index}" for index in indexes), f"indexes of {table}", url)


def create_after_rows(conn: pymysql.Connection, plan: SchemaPlan, url: MysqlUrl) -> None:
    rules = plan.rules
    pending = [(kind, rules.target(db), name, _renamed(create, rules), mode)
               for kind, db, name, create, mode in plan.after_rows]
    while pending:  # views over views: what failed for a missing view goes again once others exist
        failed = []
        for kind, db, name, create, mode in pending:
            try:
                _run(conn, f"USE {quote_name(db)}", f"database {db}", url)
                if mode:  # a routine, trigger or event keeps the sql_mode it was created under
                    _run(conn, f"SET SESSION sql_mode={conn.escape(Flavor.of(conn).sql_mode(mode))}",
                         f"{kind.lower()} {db}.{name}", url)
                _run(conn, create, f"{kind.lower()} {db}.{name}", url)
                if kind == "EVENT":  # as a native replica holds them: the primary runs them
                    _run(conn, f"ALTER EVENT {table_name(db, name)} DISABLE ON SLAVE", f"event {db}.{name}", url)
            except ApplyError as exc:
                if kind != "VIEW" or exc.code != errorcodes.NO_SUCH_TABLE:
                    raise
                failed.append((kind, db, name, create, mode))
        if len(failed) == len(pending):
            raise ApplyError(f"clone: views {', '.join(f'{d}.{n}' for _, d, n, _, _ in failed)} on replica {url} "
                             "refer to tables or views that do not exist", errorcodes.NO_SUCH_TABLE)
        pending = failed




def drop_objects(conn: pymysql.Connection, plan: SchemaPlan, url: MysqlUrl) -> None:
    """The routines, views, triggers and events a stopped clone may have created (those
    of the plan's schemas, and its views and triggers), before a resumed clone creates
    them again as of its own snapshot."""
    into = plan.rules.target
    schemas = tuple(into(db) for db in plan.databases) or ("",)
    found = [(kind, into(db), name) for kind, db, name, _, _ in plan.after_rows if kind in ("VIEW", "TRIGGER")]
    with conn.cursor() as cur:
        cur.execute("SELECT ROUTINE_TYPE, ROUTINE_SCHEMA, ROUTINE_NAME FROM information_schema.ROUTINES WHERE "
                    "ROUTINE_SCHEMA IN %s UNION ALL SELECT 'VIEW', TABLE_SCHEMA, TABLE_NAME FROM "
                    "information_schema.VIEWS WHERE TABLE_SCHEMA IN %s UNION ALL SELECT 'TRIGGER', TRIGGER_SCHEMA, "
                    "TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA IN %s UNION ALL SELECT "
                    "'EVENT', EVENT_SCHEMA, EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA IN %s",
                    (schemas,) * 4)
        found += list(cur.fetchall())
    for kind, db, name in dict.fromkeys(found):
        _run(conn, f"DROP {kind} IF EXISTS {table_name(db, name)}", f"(drop) {kind.lower()} {db}.{name}", url)


def drop_listed(conn: pymysql.Connection, listed: list[tuple[str, str]], url: MysqlUrl) -> None:
    """What a stopped clone listed (the replica's names): tables and views, then the
    schemas it created (table '')."""
    with conn.cursor() as cur:
        views = {(db, t) for db, t in listed if t and cur.execute(
            "SELECT 1 FROM information_schema.VIEWS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (db, t))}
    for db, t in listed:
        if t:
            kind = "VIEW" if (db, t) in views else "TABLE"
            _run(conn, f"DROP {kind} IF EXISTS {table_name(db, t)}", f"(drop) {kind.lower()} {db}.{t}", url)
    for db, t in listed:
        if not t:
            _run(conn, f"DROP DATABASE IF EXISTS {quote_name(db)}", f"(drop) database {db}", url)


def _run(conn: pymysql.Connection, statement: str, what: str, url: MysqlUrl) -> None:
    """``statement`` on the replica, a collation it lacks (the other flavor's) replaced by
    its character set's default there (bridge.apply.replay.portable_collations)."""
    try:
        with conn.cursor() as cur:
            known = getattr(conn, "_bridge_collation_names", None)
            if known is None:
                known = conn._bridge_collation_names = catalog.collation_names(cur)
            cur.execute(replay.portable_collations(statement.encode(), known).decode())
    except pymysql.MySQLError as exc:
        raise apply_error(f"clone: create {what} on replica {url}", exc) from exc
