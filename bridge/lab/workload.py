"""A mixed write workload and a lag probe, for the demo, tests and benchmarks.

Deterministic for a given seed: single-row and multi-statement transactions,
updates (including primary-key changes), deletes, a keyless table that holds
duplicate rows, and DDL in the middle of the stream.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pymysql

from bridge.config import MysqlUrl
from bridge.errors import SourceError
from bridge.server import dbconn
from bridge.server.flavor import Flavor

SCHEMA_DDL = (
    "CREATE TABLE {s}.accounts (id INT PRIMARY KEY, owner VARCHAR(40) NOT NULL, "
    "balance DECIMAL(18,4) NOT NULL, updated DATETIME(6) NOT NULL)",
    "CREATE TABLE {s}.ledger (account INT NOT NULL, amount DECIMAL(18,4) NOT NULL, note VARCHAR(60))",
    "CREATE TABLE {s}.items (shop INT, sku VARCHAR(20), qty INT NOT NULL, tags SET('new','sale','hot'), "
    "PRIMARY KEY (shop, sku))",
    "CREATE TABLE {s}.probe (id BIGINT PRIMARY KEY, t DOUBLE NOT NULL)",
)
OWNERS = ("ana", "bo", "chen", "dagny", "émile", "李雷", "zoë")


def connect(url: MysqlUrl) -> pymysql.Connection:
    try:
        return dbconn.connect(url, autocommit=True)
    except pymysql.MySQLError as exc:
        raise SourceError(f"connect to {url}: {exc.args[-1] if exc.args else exc}") from exc


def create_schema(conn, schema: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
        cur.execute(f"CREATE DATABASE `{schema}`")
        for ddl in SCHEMA_DDL:
            cur.execute(ddl.format(s=schema))


class MixedWorkload:
    def __init__(self, conn, schema: str, seed: int = 7, accounts: int = 500) -> None:
        self.conn, self.s, self.rng, self.accounts = conn, schema, random.Random(seed), accounts
        self.transactions = 0
        self._extra_column = False

    def run(self, count: int, progress: Callable[[int], None] | None = None) -> int:
        steps = (self.insert_account, self.transfer, self.update_account, self.delete_account,
                 self.ledger_duplicates, self.items_change, self.rekey_account)
        weights = (30, 25, 20, 5, 10, 8, 2)
        for i in range(count):
            if i and i % 997 == 0:
                self.toggle_column()
            else:
                self.rng.choices(steps, weights)[0]()
            self.transactions += 1
            if progress:
                progress(1)
        return self.transactions

    def _exec(self, *statements: tuple[str, tuple]) -> None:
        with self.conn.cursor() as cur:
            if len(statements) > 1:
                cur.execute("BEGIN")
            for sql, args in statements:
                cur.execute(sql.format(s=self.s), args)
            if len(statements) > 1:
                cur.execute("COMMIT")

    def _id(self) -> int:
        return self.rng.randrange(self.accounts)

    def insert_account(self) -> None:
        self._exec(("INSERT INTO {s}.accounts VALUES (%s,%s,%s,NOW(6)) ON DUPLICATE KEY UPDATE "
                    "balance=balance+1", (self._id(), self.rng.choice(OWNERS), self.rng.randrange(10**6) / 100)))

    def transfer(self) -> None:
        a, b, amount = self._id(), self._id(), self.rng.randrange(1, 10**4) / 100
        self._exec(("UPDATE {s}.accounts SET balance=balance-%s, updated=NOW(6) WHERE id=%s", (amount, a)),
                   ("UPDATE {s}.accounts SET balance=balance+%s, updated=NOW(6) WHERE id=%s", (amount, b)),
                   ("INSERT INTO {s}.ledger (account, amount, note) VALUES (%s,%s,%s)", (a, -amount, f"to {b}")),
                   ("INSERT INTO {s}.ledger (account, amount, note) VALUES (%s,%s,%s)", (b, amount, f"from {a}")))

    def update_account(self) -> None:
        self._exec(("UPDATE {s}.accounts SET owner=%s WHERE id=%s", (self.rng.choice(OWNERS), self._id())))

    def delete_account(self) -> None:
        self._exec(("DELETE FROM {s}.accounts WHERE id=%s", (self._id(),)))

    def ledger_duplicates(self) -> None:
        row = (self._id(), 1, "dup")
        insert = ("INSERT INTO {s}.ledger (account, amount, note) VALUES (%s,%s,%s)", row)
        self._exec(insert, insert)
        if self.rng.random() < 0.3:
            self._exec(("DELETE FROM {s}.ledger WHERE account=%s AND note='dup' LIMIT 1", (row[0],)))

    def items_change(self) -> None:
        shop, sku = self.rng.randrange(5), f"sku-{self.rng.randrange(50)}"
        tags = ",".join(self.rng.sample(["new", "sale", "hot"], self.rng.randrange(4)))
        self._exec(("INSERT INTO {s}.items VALUES (%s,%s,1,%s) ON DUPLICATE KEY UPDATE qty=qty+1, tags=%s",
                    (shop, sku, tags, tags)))

    def rekey_account(self) -> None:
        """Primary-key change: the row moves to a new id."""
        self._exec(("UPDATE IGNORE {s}.accounts SET id=id+%s WHERE id=%s", (self.accounts, self._id())))

    def toggle_column(self) -> None:
        action = "DROP COLUMN note2" if self._extra_column else "ADD COLUMN note2 VARCHAR(10) DEFAULT 'x'"
        self._exec((f"ALTER TABLE {{s}}.ledger {action}", ()))
        self._extra_column = not self._extra_column


def probe_lag(primary, replica, schema: str, samples: int, timeout_s: float = 10.0) -> list[float]:
    """Seconds from the primary's commit returning to the row being visible on the
    replica, per sample (polling adds tens of microseconds)."""
    lags = []
    with primary.cursor() as pc, replica.cursor() as rc:
        pc.execute(f"DELETE FROM `{schema}`.probe")
        for i in range(samples):
            pc.execute(f"INSERT INTO `{schema}`.probe VALUES (%s, %s)", (i, time.time()))
            committed = time.perf_counter()
            deadline = committed + timeout_s
            while not rc.execute(f"SELECT 1 FROM `{schema}`.probe WHERE id=%s", (i,)):
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"lag probe: row {i} not on the replica after {timeout_s}s")
            lags.append(time.perf_counter() - committed)
    return lags


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


_DIGITS = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL " \
          "SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"


def numbers(conn, schema: str, last: int, first: int = 1) -> str:
    """A table of one column ``seq`` holding ``first``..``last``, for INSERT ... SELECT:
    MariaDB's Sequence engine table (``schema.seq_1_to_N``), or on MySQL, which has no
    such engine, a cross join of digits."""
    if not Flavor.of(conn).is_mysql:
        return f"{schema}.seq_{first}_to_{last}"
    places = len(str(last - first))
    value = " + ".join(f"d{i}.d * {10 ** i}" for i in range(places))
    joined = ", ".join(f"{_DIGITS} AS d{i}" for i in range(places))
    return f"(SELECT seq FROM (SELECT {first} + {value} AS seq FROM {joined}) AS n WHERE seq <= {last}) AS numbers"
