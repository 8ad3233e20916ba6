"""Checksum through the bridge: no false mismatch under concurrent writes; divergence
injected on the replica (changed, deleted, extra and duplicated rows) is found exactly
(table and key range), repaired through the bridge, and checked clean again."""

import threading

import pytest
from click.testing import CliRunner

from bridge.check.checksum import Checksummer
from bridge.check.repair import Repairer
from bridge.cli import main
from bridge.lab.workload import connect
from tests.conftest import BridgePair
from tests.helpers import numbers
from tests.integration.test_types import TYPES_TABLE, type_rows

ROWS = 3000


def setup_tables(pair, s):
    pair.sql(f"CREATE DATABASE {s}",
             f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT, note VARCHAR(20), d DATETIME NULL)",
             f"INSERT INTO {s}.t SELECT seq, seq % 97, CONCAT('n', seq), IF(seq % 5 = 0, NULL, '2024-01-01') "
             f"FROM {numbers(pair.primary, s, ROWS)}",
             f"CREATE TABLE {s}.uk (a INT NOT NULL, b VARCHAR(10) NOT NULL, v INT, UNIQUE KEY ab (a, b))",
             f"INSERT INTO {s}.uk SELECT seq % 50, CONCAT('k', seq), seq FROM {numbers(pair.primary, s, 500)}",
             f"CREATE TABLE {s}.bag (x INT, y VARCHAR(10))",
             f"INSERT INTO {s}.bag VALUES (1, 'a'), (1, 'a'), (2, NULL)")
    pair.sync()


def checker(urls, pair, **kw):
    return Checksummer(urls["primary_admin"], urls["replica_admin"], pair.channel, chunk_time_s=0.001, **kw)


def repair(urls, pair):
    """(chunks repaired, the re-check) of one `rdma-bridge repair` run on the pair's channel."""
    repairer = Repairer(urls["primary_admin"], urls["replica_admin"], pair.channel)
    try:
        return repairer.run()
    finally:
        repairer.close()


def in_range(m, key: int) -> bool:
    return (m.lower is None or int(m.lower) < key) and (m.upper is None or key <= int(m.upper))


def test_no_false_mismatch_under_concurrent_writes(urls, fresh_schema):
    s = fresh_schema("cks")
    pair = BridgePair(urls, "shm").start()
    stop = threading.Event()

    def writer():
        conn = connect(urls["primary_admin"])
        i = 0
        while not stop.is_set():
            with conn.cursor() as cur:
                cur.execute(f"UPDATE {s}.t SET v = v + 1, note = 'w{i}' WHERE id = {1 + i * 37 % ROWS}")
                cur.execute(f"INSERT INTO {s}.bag VALUES ({i}, 'w')")
            i += 1
        conn.close()

    try:
        setup_tables(pair, s)
        thread = threading.Thread(target=writer)
        thread.start()
        c = checker(urls, pair)
        try:
            run = c.run([s])
        finally:
            stop.set()
            thread.join()
            c.close()
        assert run.tables == 3 and run.chunks > 10, run
        assert run.mismatches == [], run.mismatches
        assert any("bag: no primary or NOT NULL unique key" in n for n in run.notes), run.notes
        pair.assert_same(s)
    finally:
        stop.set()
        pair.stop()


def test_injected_divergence_is_found_exactly_repaired_and_clean(urls, fresh_schema, tmp_path):
    s = fresh_schema("diverge")
    pair = BridgePair(urls, "tcp").start()
    try:
        setup_tables(pair, s)
        with pair.replica.cursor() as cur:  # someone wrote on the replica
            cur.execute(f"UPDATE {s}.t SET v = -1 WHERE id = 150")  # changed
            cur.execute(f"DELETE FROM {s}.t WHERE id = 1234")  # deleted
            cur.execute(f"INSERT INTO {s}.t VALUES ({ROWS + 50}, 1, 'extra', NULL)")  # extra, past the end
            cur.execute(f"INSERT INTO {s}.bag VALUES (1, 'a')")  # a third duplicate
            cur.execute(f"UPDATE {s}.uk SET v = v + 1 WHERE a = 7 AND b = 'k257'")
        pair.replica.commit()
        c = checker(urls, pair)
        try:
            run = c.run([s])
        finally:
            c.close()
        found = {(m.tbl, m.chunk) for m in run.mismatches}
        t_chunks = [m for m in run.mismatches if m.tbl == "t"]
        assert len(t_chunks) == 3, run.mismatches
        for key in (150, 1234, ROWS + 50):
            assert sum(in_range(m, key) for m in t_chunks) == 1, (key, t_chunks)
        deleted = next(m for m in t_chunks if in_range(m, 1234))
        assert deleted.this_cnt == deleted.master_cnt - 1
        assert ("bag", 0) in found and len([m for m in run.mismatches if m.tbl == "uk"]) == 1
        bag = next(m for m in run.mismatches if m.tbl == "bag")
        assert (bag.master_cnt, bag.this_cnt) == (3, 4)  # the duplicate counts: no XOR cancelling
        assert len(run.mismatches) == 5

        # the same divergence, found by the CLI in --offline mode (the bridge is idle)
        out = CliRunner().invoke(main, ["checksum", "--offline", "--chunk-time", "0.001", "--schema", s],
                                 env={"RDMA_BRIDGE_CHECK_SOURCE": _url(urls["primary_admin"]),
                                      "RDMA_BRIDGE_CHECK_TARGET": _url(urls["replica_admin"])})
        assert out.exit_code == 1 and out.output.count("MISMATCH") == 5, out.output

        repaired, recheck = repair(urls, pair)
        assert repaired == 5
        assert recheck.mismatches == [], recheck.mismatches
        pair.assert_same(s)  # row by row, duplicates counted
        c = checker(urls, pair)
        try:
            assert c.run([s]).mismatches == []
        finally:
            c.close()
    finally:
        pair.stop()


def test_a_repair_too_large_for_one_frame_replaces_its_range_at_its_last_chunk(urls, fresh_schema):
    """A repaired range whose copy outgrows the ring's chunk size travels as chunks; the
    replica's rows of the range are replaced once the last one is in, with the position."""
    s = fresh_schema("bigrepair")
    pair = BridgePair(urls, "tcp", ring_bytes=1 << 16).start()  # chunks of 16 KiB
    applier = pair.replica_node.applier
    chunks, apply_chunk = [], applier.apply_chunk

    def counted(seq, chunk):
        chunks.append((chunk.index, chunk.is_repair, chunk.last))
        return apply_chunk(seq, chunk)
    applier.apply_chunk = counted
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v TEXT)",
                 *[f"INSERT INTO {s}.t VALUES ({i}, REPEAT('{i % 10}', 1000))" for i in range(200)])
        pair.sync()
        with pair.replica.cursor() as cur:
            cur.execute(f"UPDATE {s}.t SET v = 'changed behind the bridge' WHERE id = 77")
            cur.execute(f"DELETE FROM {s}.t WHERE id = 150")
        pair.replica.commit()
        c = Checksummer(urls["primary_admin"], urls["replica_admin"], pair.channel, chunk_time_s=10)  # one chunk
        try:
            assert [m.tbl for m in c.run([s]).mismatches] == ["t"]
        finally:
            c.close()
        chunks.clear()
        repaired, recheck = repair(urls, pair)
        assert repaired == 1 and recheck.mismatches == []
        # ~200 KiB in 16 KiB chunks: the first names the repair (its marker), the last replaces the range
        assert len(chunks) >= 5 and chunks[0] == (0, True, False) and chunks[-1][2], chunks
        assert [index for index, _, _ in chunks] == list(range(len(chunks)))
        pair.assert_same(s)
    finally:
        applier.apply_chunk = apply_chunk
        pair.stop()


def _url(u) -> str:
    return f"mysql://{u.user}:{u.password}@{u.host}:{u.port}"


@pytest.mark.parametrize("hash_kind", ["md5", "sha2"])
def test_the_digest_hashes_for_servers_without_crc32c_find_divergence_too(urls, fresh_schema, flavors, hash_kind):
    if not all(hash_kind in f.row_hashes for f in flavors):
        pytest.skip(f"{hash_kind} is not a hash of {' and '.join(f.name for f in flavors)} (MySQL 9 has no MD5)")
    s = fresh_schema("md5")
    pair = BridgePair(urls, "shm").start()
    try:
        setup_tables(pair, s)
        with pair.replica.cursor() as cur:
            cur.execute(f"INSERT INTO {s}.bag VALUES (1, 'a')")  # a duplicate: sums differ, XOR would not
        pair.replica.commit()
        c = checker(urls, pair)
        c.hash_kind = hash_kind  # as against MySQL, which has no CRC32C()
        try:
            run = c.run([s])
        finally:
            c.close()
        assert [(m.tbl, m.master_cnt, m.this_cnt) for m in run.mismatches] == [("bag", 3, 4)]
    finally:
        pair.stop()


@pytest.mark.parametrize("mode", ["binlog", "sql"])
def test_repair_fixes_a_table_of_every_column_type(urls, fresh_schema, mode):
    s = fresh_schema("repairtypes")
    pair = BridgePair(urls, "shm", apply_mode=mode).start()
    try:
        pair.sql(f"CREATE DATABASE {s}", TYPES_TABLE.format(s=s))
        for row in type_rows(pair.primary, pair.replica):
            pair.sql(f"INSERT INTO {s}.types VALUES {row}")
        pair.sql(f"INSERT INTO {s}.types SELECT id + 10, ti, tiu, si, siu, mi, miu, i, iu, bi, biu, d1, d2, d3, f, db, "
                 f"b1, b3, b64, dt, dtm, dtm6, ts, ts3, tm, tm2, tm6, y, c, vc, tx, mtx, lat, bn, vb, bl, lbl, j, e, st "
                 f"FROM {s}.types")
        pair.sync()
        with pair.replica.cursor() as cur:  # damage of every kind, on rows of every type
            cur.execute(f"UPDATE {s}.types SET f = f + 1, ts3 = '2001-01-01 00:00:00.123', j = '[]', b64 = b'1', "
                        f"bn = x'01', st = 'b', d2 = 1, tx = 'changed' WHERE id IN (1, 13)")
            cur.execute(f"DELETE FROM {s}.types WHERE id = 3")
            cur.execute(f"INSERT INTO {s}.types (id, f, db, ts3, j) VALUES (99, 1.5, 2.5, NOW(3), '{{}}')")
        pair.replica.commit()
        c = checker(urls, pair)
        try:
            assert c.run([s]).mismatches
        finally:
            c.close()
        repaired, recheck = repair(urls, pair)
        assert repaired and recheck.mismatches == [], recheck.mismatches
        pair.assert_same(s)
    finally:
        pair.stop()
