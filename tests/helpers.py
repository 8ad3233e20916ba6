"""Helpers shared by the integration and fault tests."""

from __future__ import annotations

import threading
import time

from bridge.check.positions import primary_position
from bridge.lab.workload import MixedWorkload, connect, numbers  # noqa: F401 (numbers: the tests import it here)
from bridge.server.flavor import Flavor


def channel_row(conn, channel) -> tuple[int, str]:
    """(applied_seq, gtid_set) the replica recorded for a channel; (0, '') before any."""
    with conn.cursor() as cur:
        cur.execute("SELECT applied_seq, gtid_set FROM rdma_bridge.bridge_meta WHERE channel=%s", (channel,))
        row = cur.fetchone()
    return (row[0], row[1]) if row else (0, "")


def applied_seq(conn, channel) -> int:
    return channel_row(conn, channel)[0]


def semi_sync_status(conn) -> dict:
    """The primary's Rpl_semi_sync_master_* (MySQL: _source_*) status, without the prefix
    (status, yes_tx, no_tx, clients...)."""
    prefix = Flavor.of(conn).semi_sync_status_prefix.lower()
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE %s", (prefix + "%",))
        return {k.lower().removeprefix(prefix): v for k, v in cur.fetchall()}


def set_semi_sync(conn, **settings) -> None:
    """SET GLOBAL rpl_semi_sync_master_<name> (MySQL: _source_) = value, for each name=value."""
    flavor = Flavor.of(conn)
    with conn.cursor() as cur:
        for name, value in settings.items():
            cur.execute(f"SET GLOBAL {flavor.semi_sync_variable(name)}={value}")


def semi_sync_on(admin, pair, schema: str) -> None:
    """The primary runs semi-sync with this pair's bridge acknowledging: its client is
    registered, and the status ON, which MariaDB 11 reaches only with the first ACK of a
    commit (10.11 is ON at once): one row into ``schema``.warm per try."""
    wait_for(lambda: semi_sync_status(admin)["clients"] == "1", "the bridge as semi-sync client")
    pair.sql(f"CREATE TABLE IF NOT EXISTS {schema}.warm (id INT AUTO_INCREMENT PRIMARY KEY)")
    wait_for(lambda: pair.sql(f"INSERT INTO {schema}.warm () VALUES ()") or
             semi_sync_status(admin)["status"] == "ON", "semi-sync ON")


def wait_for(predicate, what: str, timeout_s: float = 60.0, alive=lambda: None) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def wait_shipped(node, more: int = 30, timeout_s: float = 60.0, alive=lambda: None) -> None:
    """Until the primary side ``node`` (in this process) has shipped ``more`` transactions
    past now: the running workload flows through it (instead of a fixed sleep before a
    fault, which on a slow machine may pass before anything was shipped)."""
    start = node.counts.transactions_shipped
    wait_for(lambda: node.counts.transactions_shipped >= start + more, f"{more} more transactions shipped",
             timeout_s, alive)


def wait_written(conn, more: int = 30, timeout_s: float = 60.0, alive=lambda: None) -> None:
    """Until the primary (``conn``) has committed ``more`` transactions past now (the
    seqs of its GTID position, summed over domains): the running workload wrote that much."""
    def seq() -> int:
        return primary_position(conn).count()
    start = seq()
    wait_for(lambda: seq() >= start + more, f"{more} more transactions on the primary", timeout_s, alive)


class BackgroundWorkload:
    """The mixed workload in a thread, in batches of ten transactions, until the ``with``
    block ends; ``pause_s`` between batches bounds its rate (else: as fast as the primary
    takes them)."""

    def __init__(self, url, schema: str, seed: int = 7, pause_s: float = 0.0) -> None:
        self.workload = MixedWorkload(connect(url), schema, seed=seed)
        self.stop = threading.Event()
        self.pause_s = pause_s
        self.thread = threading.Thread(target=self._run, name="workload")

    def _run(self) -> None:
        while not self.stop.is_set():
            self.workload.run(10)
            if self.pause_s:
                self.stop.wait(self.pause_s)

    def __enter__(self) -> BackgroundWorkload:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def concurrent_writes(url, statements, during, writers: int = 4) -> None:
    """``writers`` connections to ``url``, writer k running ``statements(k * 1000)`` (SQL
    texts) while ``during()`` runs in this thread; back once every writer is done."""
    def write(first: int) -> None:
        conn = connect(url)
        with conn.cursor() as cur:
            for sql in statements(first):
                cur.execute(sql)
        conn.close()

    threads = [threading.Thread(target=write, args=(n * 1000,)) for n in range(writers)]
    for t in threads:
        t.start()
    during()
    for t in threads:
        t.join()


def table_rows(conn, schema: str, table: str = "t") -> int:
    """Rows in ``schema``.``table`` from a fresh read view of ``conn`` (0 while the table
    does not exist there yet)."""
    conn.commit()
    with conn.cursor() as cur:
        if not cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                           (schema, table)):
            return 0
        cur.execute(f"SELECT COUNT(*) FROM {schema}.{table}")
        return cur.fetchone()[0]
