"""An apply error stops applying, not the process (as a native replica stops its SQL
thread): the replica side stays up, keeps its session and keeps receiving, shows the
error in /status, /metrics and `status`; the operator fixes the cause and runs
`rdma-bridge resume`, or skips the one transaction with `rdma-bridge skip --gtid`.
Both end with the databases equal row by row, nothing lost or applied twice."""

import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.check.checksum import Checksummer
from bridge.errors import ApplyError
from bridge.lab.workload import connect
from bridge.model import GtidSet
from tests.conftest import BridgePair, primary_position
from tests.helpers import wait_for


def bridge(*args):
    return subprocess.run([sys.executable, "-m", "bridge", *args], capture_output=True, text=True, timeout=60)


def get(address, path):
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}{path}", timeout=5) as resp:
        return resp.read().decode()


def stopped_metric(text):
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rdma_bridge_apply_stopped":
                return sample.value, sample.labels.get("code")
    raise AssertionError("rdma_bridge_apply_stopped not in /metrics")


class Workload(threading.Thread):
    """Single-row inserts on the primary as fast as they go, ids from 1, until stopped."""

    def __init__(self, pair, schema):
        super().__init__(daemon=True)
        self.schema, self.count, self.done = schema, 0, threading.Event()
        self.conn = connect(pair.urls["primary_admin"])

    def run(self):
        with self.conn.cursor() as cur:
            while not self.done.is_set():
                self.count += 1
                cur.execute(f"INSERT INTO {self.schema}.t VALUES ({self.count}, 'primary {self.count}')")
        self.conn.close()


def halted(pair):
    return pair.replica_node.halt


@pytest.mark.parametrize("workers", [1, 4])
def test_an_apply_error_mid_stream_stops_applying_and_resume_goes_on_after_the_fix(urls, fresh_schema, workers):
    s = fresh_schema("stopresume")
    pair = BridgePair(urls, "tcp", metrics=True, workers=workers).start()
    load = None
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(32))")
        pair.sync()
        with pair.replica.cursor() as cur:  # a row changed on the replica by hand: the primary's insert collides
            cur.execute(f"INSERT INTO {s}.t VALUES (300, 'by hand')")
        load = Workload(pair, s)
        load.start()
        wait_for(lambda: halted(pair), timeout_s=60, what="applying to stop on the duplicate key")
        halt = halted(pair)
        assert halt.code == 1062 and f"{s}.t" in halt.error and "Duplicate entry '300'" in halt.error, halt.error
        # stopped, not dead: the session stays, frames keep arriving, the position stays before the failed one
        shipped = pair.primary_node.counts.transactions_shipped
        wait_for(lambda: pair.primary_node.counts.transactions_shipped > shipped + 100, timeout_s=30, what="shipping to go on")
        assert not pair.errors and pair.replica_node.session
        assert pair.replica_node.applier.position.applied_seq == halt.seq - 1
        assert pair.primary_node.member.apply_stopped["seq"] == halt.seq
        # what the operator sees
        status = json.loads(get(pair.replica_node.metrics.address, "/status"))["apply_stopped"]
        assert status["seq"] == halt.seq and status["gtid"] == halt.gtid and status["code"] == 1062
        assert stopped_metric(get(pair.replica_node.metrics.address, "/metrics")) == (1.0, "1062")
        table = bridge("status", "--replica-metrics", "%s:%d" % pair.replica_node.metrics.address,
                       "--primary-metrics", "%s:%d" % pair.primary_node.metrics.address)
        assert f"STOPPED at seq {halt.seq} ({halt.gtid})" in table.stdout, table.stdout + table.stderr
        # resume before the fix: it stops again on the same transaction, and says so
        again = bridge("resume", "--replica", "%s:%d" % pair.replica_node.address)
        assert again.returncode == 0 and f"applying stopped again at seq {halt.seq}" in again.stdout, again
        # the fix, then resume
        with pair.replica.cursor() as cur:
            cur.execute(f"DELETE FROM {s}.t WHERE id=300")
        done = bridge("resume", "--replica", "%s:%d" % pair.replica_node.address)
        assert done.returncode == 0 and f"applying again from seq {halt.seq}" in done.stdout, done
        resumed_at = load.count
        wait_for(lambda: load.count > resumed_at + 100, timeout_s=30, what="writes after the resume")
        load.done.set()
        load.join()
        assert load.count > 300
        result = pair.assert_same(s)
        assert result.digests and halted(pair) is None and not pair.errors
        assert stopped_metric(get(pair.replica_node.metrics.address, "/metrics")) == (0.0, "")
    finally:
        if load is not None:
            load.done.set()
        pair.stop()


def test_skip_passes_over_the_one_transaction_already_applied_by_hand(urls, fresh_schema):
    s = fresh_schema("stopskip")
    pair = BridgePair(urls, "shm").start()
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(32))",
                 f"INSERT INTO {s}.t VALUES (1, 'one')")
        pair.sync()
        with pair.replica.cursor() as cur:  # the operator applied the primary's next change by hand
            cur.execute(f"INSERT INTO {s}.t VALUES (2, 'two')")
        pair.sql(f"INSERT INTO {s}.t VALUES (2, 'two')", f"INSERT INTO {s}.t VALUES (3, 'three')")
        wait_for(lambda: halted(pair), timeout_s=30, what="applying to stop")
        halt = halted(pair)
        address = "%s:%d" % pair.replica_node.address
        started = time.monotonic()  # a checksum sees the stop at once, and says what goes on
        checker = Checksummer(urls["primary_admin"], urls["replica_admin"], pair.channel, progress=lambda _m: None)
        try:
            with pytest.raises(ApplyError, match=f"applying is stopped .* at seq {halt.seq}.*Duplicate entry.*"
                                                 f"rdma-bridge skip --gtid {halt.gtid}"):
                checker.run(schemas=[s])
        finally:
            checker.close()
        assert time.monotonic() - started < 60  # not the 300 s wait for a replica that never catches up
        wrong = bridge("skip", "--gtid", "0-1-999999999", "--replica", address)
        assert wrong.returncode == 1 and f"applying stopped at {halt.gtid}" in wrong.stderr, wrong
        done = bridge("skip", "--gtid", halt.gtid, "--replica", address)
        assert done.returncode == 0 and f"skipped seq {halt.seq} ({halt.gtid})" in done.stdout, done
        pair.assert_same(s)
        with pair.replica.cursor() as cur:
            cur.execute("SELECT seq, gtid, error, skipped_by FROM rdma_bridge.skipped WHERE channel=%s",
                        (pair.channel,))
            rows = cur.fetchall()
        assert len(rows) == 1 and rows[0][:2] == (halt.seq, halt.gtid) and "Duplicate entry '2'" in rows[0][2]
        assert "@" in rows[0][3] and "127.0.0.1" in rows[0][3]
        with pair.replica.cursor() as cur:  # when the skip was made, not the last replayed event's time
            cur.execute("SELECT TIMESTAMPDIFF(SECOND, skipped_at, SYSDATE(6)), read_at IS NOT NULL, "
                        "read_at <= skipped_at FROM rdma_bridge.skipped WHERE channel=%s", (pair.channel,))
            assert cur.fetchone() == (0, 1, 1)
            cur.execute("SELECT COUNT(*) FROM rdma_bridge.apply_stopped WHERE channel=%s", (pair.channel,))
            assert cur.fetchone()[0] == 0  # going on again: no stop recorded
        pair.replica.commit()
        assert pair.replica_node.applier.position.gtid_set.contains_all(GtidSet.parse(halt.gtid))
        nothing = bridge("skip", "--gtid", halt.gtid, "--replica", address)
        assert nothing.returncode == 1 and "applying is not stopped" in nothing.stderr
    finally:
        pair.stop()


@pytest.mark.parametrize("first", ["replica", "primary"])
def test_no_thread_ends_with_an_uncaught_exception_when_a_side_stops(urls, fresh_schema, first, monkeypatch):
    uncaught = []
    monkeypatch.setattr(threading, "excepthook", lambda args: uncaught.append((args.thread.name, args.exc_value)))
    s = fresh_schema("stoppaths")
    pair = BridgePair(urls, "tcp").start()
    load = None
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(32))")
        load = Workload(pair, s)
        load.start()
        wait_for(lambda: load.count > 200, timeout_s=30, what="traffic")
        nodes = [pair.replica_node, pair.primary_node]
        for node in nodes if first == "replica" else reversed(nodes):
            node.close()
            time.sleep(0.5)
        pair.replica_node = pair.primary_node = None  # closed
    finally:
        if load is not None:
            load.done.set()
            load.join()
        pair.stop()
    time.sleep(0.5)
    assert not uncaught


def test_a_delayed_replica_shows_a_row_no_earlier_than_the_delay(urls, fresh_schema):
    s = fresh_schema("delayed")
    pair = BridgePair(urls, "shm", delay_s=1.5).start()
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT)")
        pair.sync()
        seen = {}
        with pair.replica.cursor() as cur:
            for i in range(1, 4):
                pair.sql(f"INSERT INTO {s}.t VALUES ({i}, {i})")
                committed = time.time()  # the commit returned: it happened before this
                while not cur.execute(f"SELECT 1 FROM {s}.t WHERE id={i}"):
                    pair.replica.commit()
                    time.sleep(0.005)
                seen[i] = time.time() - committed
        assert all(waited >= 1.5 for waited in seen.values()), seen
        pair.assert_same(s)
    finally:
        pair.stop()


def test_until_gtid_stops_applying_there_and_resume_applies_on(urls, fresh_schema):
    s = fresh_schema("until")
    pair = BridgePair(urls, "shm")
    try:
        with pair.primary.cursor() as cur:
            cur.execute(f"CREATE DATABASE {s}")
            cur.execute(f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
            for i in range(1, 6):
                cur.execute(f"INSERT INTO {s}.t VALUES ({i})")
                if i == 3:
                    until = primary_position(pair.primary)
        pair.replica_options = {"until_gtid": until}
        pair.start()  # the five inserts wait in the ring together: the group must end at the third
        wait_for(lambda: halted(pair), timeout_s=30, what="applying to stop at --until-gtid")
        halt = halted(pair)
        assert halt.until and halt.code == 0 and until in halt.error
        with pair.replica.cursor() as cur:
            cur.execute(f"SELECT id FROM {s}.t ORDER BY id")
            assert [r[0] for r in cur.fetchall()] == [1, 2, 3]
        assert GtidSet.parse(until).contains_all(pair.replica_node.applier.position.gtid_set)
        refused = bridge("skip", "--gtid", halt.gtid, "--replica", "%s:%d" % pair.replica_node.address)
        assert refused.returncode == 1 and "not on an error" in refused.stderr
        done = bridge("resume", "--replica", "%s:%d" % pair.replica_node.address)
        assert done.returncode == 0, done
        pair.assert_same(s)
    finally:
        pair.stop()


def test_how_far_behind_while_stopped_and_while_catching_up(urls, fresh_schema):
    s = fresh_schema("behind")
    pair = BridgePair(urls, "shm", metrics=True, heartbeat_s=0.1)
    try:
        pair.start_replica()
        pair.start_primary(behind_poll_s=0.1)
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(32))")
        pair.sync()
        with pair.replica.cursor() as cur:
            cur.execute(f"INSERT INTO {s}.t VALUES (1, 'by hand')")
        with pair.primary.cursor() as cur:
            for i in range(1, 2001):
                cur.execute(f"INSERT INTO {s}.t VALUES ({i}, 'primary {i}')")
        wait_for(lambda: halted(pair), timeout_s=30, what="applying to stop")

        def behind():
            return pair.primary_node.status()["behind"] or {}

        wait_for(lambda: behind().get("transactions", 0) >= 2000, timeout_s=30, what="2000 transactions behind")
        wait_for(lambda: behind().get("apply_rate_tps") == 0.0, timeout_s=30, what="no progress to show")
        assert behind()["catch_up_eta_s"] is None and behind()["bytes"] > 2000 * 20
        table = bridge("status", "--replica-metrics", "%s:%d" % pair.replica_node.metrics.address,
                       "--primary-metrics", "%s:%d" % pair.primary_node.metrics.address)
        assert " transactions, " in table.stdout and "applying is STOPPED on the replica" in table.stdout and \
            "(no ETA)" in table.stdout and "caught up in" not in table.stdout, table.stdout

        def lag():
            return pair.replica_node.status()["counters"]["last_lag_seconds"]
        before = lag()
        time.sleep(1.0)
        assert lag() >= before + 0.9  # nothing applied: the lag grows, it does not freeze
        text = get(pair.primary_node.metrics.address, "/metrics")
        behind_metric = next(line for line in text.splitlines()
                             if line.startswith('rdma_bridge_behind_transactions{role="primary"}'))
        assert float(behind_metric.split()[-1]) >= 2000  # the heartbeat rows go on being written meanwhile
        with pair.replica.cursor() as cur:
            cur.execute(f"DELETE FROM {s}.t WHERE id=1")
        pair.replica_node.resume()
        wait_for(lambda: behind().get("catch_up_eta_s") == 0.0 and (behind().get("apply_rate_tps") or 0) > 0,
                 timeout_s=30, what="caught up, with the rate it applied at")
        assert behind()["transactions"] <= 2  # at most the heartbeats in flight
        pair.assert_same(s)
    finally:
        pair.stop()


@pytest.mark.parametrize("first", ["statement", "rows"])
def test_skipping_a_sessions_first_transaction_keeps_its_format_for_the_next(urls, fresh_schema, first):
    """A session's FORMAT_DESCRIPTION travels once, with its first transaction; skipping
    that transaction must leave it in force, or the next raw row events cannot be
    applied (they stopped the replica side's process, before)."""
    s = fresh_schema("skipfirst")
    made = [f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(32))"]
    primary, replica = connect(urls["primary_admin"]), connect(urls["replica_admin"])
    with primary.cursor() as p, replica.cursor() as r:
        for statement in made:  # both sides, before the channel's start: not replicated
            p.execute(statement)
            r.execute(statement)
        r.execute(f"CREATE TABLE {s}.extra (id INT)" if first == "statement" else f"INSERT INTO {s}.t VALUES (1, 'x')")
    primary.close()
    replica.close()
    pair = BridgePair(urls, "shm").start()
    try:
        pair.sql(f"CREATE TABLE {s}.extra (id INT)" if first == "statement" else f"INSERT INTO {s}.t VALUES (1, 'x')")
        wait_for(lambda: halted(pair), timeout_s=30, what="applying to stop at the first transaction")
        halt = halted(pair)
        assert halt.seq == 1
        pair.replica_node.skip(halt.gtid, "test")
        pair.sql(f"INSERT INTO {s}.t VALUES (2, 'after the skip')", f"UPDATE {s}.t SET v='row events' WHERE id=2")
        pair.assert_same(s)
        assert pair.replica_node.halt is None and not pair.errors
    finally:
        pair.stop()
