"""Clone throughput against `mariadb-dump | mariadb` of the same data, in the same run.

A schema of ROWS rows over four tables (narrow integers, strings, a mix of types, and
wider rows with a blob) on the sandbox primary; each method copies it into the sandbox
replica (the schema dropped there before each): the dump pipe
(`mariadb-dump --single-transaction --gtid ... | mariadb`, both through the servers'
unix sockets), then `rdma-bridge clone` with 1 and 2 parallel connections, and with 2 and
`--defer-indexes` (the four secondary indexes of two tables built after their rows). Rows/s and
MB/s (the bytes clone counted, the same data for all), ratios clone over dump pipe.

    python -m bench.clone [--rows 1000000] [--state-dir .sandbox]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bridge.clone.run import Cloner
from bridge.config import MysqlUrl
from bridge.lab.runners import find_binary
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import connect
from bridge.server.sqlnames import META

SCHEMA = "bench_clone"
TABLES = {  # name: (share of the rows, CREATE body, SELECT over seq)
    "narrow": (0.4, "(id INT PRIMARY KEY, a INT, b BIGINT)", "seq, seq % 1000, seq * 7"),
    "strings": (0.3, "(id INT PRIMARY KEY, name VARCHAR(64), note VARCHAR(200), KEY (name), KEY (note(20)))",
                "seq, CONCAT('name ', seq), REPEAT(CHAR(65 + seq % 26), 40 + seq % 100)"),
    "mixed": (0.2, "(id INT PRIMARY KEY, d DECIMAL(12,2), f FLOAT, dt DATETIME(6), ts TIMESTAMP NULL, e ENUM('a','b'),"
                   " j JSON, KEY (dt), KEY (e, d))",
              "seq, seq / 100, seq / 3, '2024-01-01 00:00:00' + INTERVAL seq SECOND, "
              "FROM_UNIXTIME(1700000000 + seq), IF(seq % 2, 'a', 'b'), CONCAT('{\"k\": ', seq, '}')"),
    "wide": (0.1, "(id INT PRIMARY KEY, payload BLOB, t TEXT)", "seq, RANDOM_BYTES(200), REPEAT('w', 300)"),
}


def load(conn, rows: int) -> None:
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        cur.execute(f"CREATE DATABASE {SCHEMA}")
        for name, (share, body, select) in TABLES.items():
            cur.execute(f"CREATE TABLE {SCHEMA}.{name} {body}")
            cur.execute(f"INSERT INTO {SCHEMA}.{name} SELECT {select} FROM {SCHEMA}.seq_1_to_{int(rows * share)}")


def drop_on_replica(conn, channel: str | None = None) -> None:
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        if channel:
            cur.execute(f"DELETE FROM {META} WHERE channel=%s", (channel,))
            cur.execute("DELETE FROM rdma_bridge.clone_state WHERE channel=%s", (channel,))
            cur.execute("DELETE FROM rdma_bridge.channel_filter WHERE channel=%s", (channel,))


def dump_pipe(box: Sandbox) -> float:
    primary, replica = box.dir / "primary" / "mysqld.sock", box.dir / "replica" / "mysqld.sock"
    started = time.perf_counter()
    dump = subprocess.Popen([find_binary("mariadb-dump"), f"--socket={primary}", "--user=root", "--single-transaction",
                             "--gtid", "--master-data=2", "--routines", "--events", "--triggers", "--databases",
                             SCHEMA], stdout=subprocess.PIPE)
    loaded = subprocess.run([find_binary("mariadb"), f"--socket={replica}", "--user=root"], stdin=dump.stdout,
                            capture_output=True)
    dump.stdout.close()
    if dump.wait() != 0 or loaded.returncode != 0:
        raise RuntimeError(f"dump pipe failed: {loaded.stderr.decode(errors='replace')[-400:]}")
    return time.perf_counter() - started


def run(rows: int, state_dir: str, log=print) -> dict:
    box = Sandbox(state_dir)
    info = box.up()
    primary, replica = MysqlUrl.parse(info["primary_admin"]), MysqlUrl.parse(info["replica_admin"])
    pconn, rconn = connect(primary), connect(replica)
    log(f"clone bench: loading {rows:,} rows ...")
    load(pconn, rows)
    results = {}
    try:
        drop_on_replica(rconn)
        seconds = dump_pipe(box)
        results["dump pipe"] = {"seconds": round(seconds, 2)}
        log(f"dump pipe: {seconds:.1f}s")
        for parallel, defer in ((1, False), (2, False), (2, True)):
            channel = f"bench_clone_{time.time_ns()}"
            drop_on_replica(rconn)
            result = Cloner(primary, replica, channel=channel, schemas=(SCHEMA,), parallel=parallel,
                            say=lambda _line: None, defer_indexes=defer).run()
            name = f"clone, {parallel} connection(s)" + (", --defer-indexes" if defer else "")
            results[name] = {"seconds": round(result.seconds, 2), "rows": result.rows, "bytes": result.bytes}
            log(f"{name}: {result.seconds:.1f}s, {result.rows:,} rows, {result.bytes / 1e6:.1f} MB")
            drop_on_replica(rconn, channel)
    finally:
        with pconn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        drop_on_replica(rconn)
    copied = next(r for k, r in results.items() if k.startswith("clone"))
    for r in results.values():
        r["rows_per_s"] = round(copied["rows"] / r["seconds"])
        r["mb_per_s"] = round(copied["bytes"] / 1e6 / r["seconds"], 1)
    base = results["dump pipe"]["seconds"]
    return {"benchmark": "clone vs mariadb-dump | mariadb, same data, same run", "rows": rows, "methods": results,
            "ratios": {f"{k} over the dump pipe, rows/s (higher is better)": round(base / r["seconds"], 2)
                       for k, r in results.items() if k != "dump pipe"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--state-dir", default=".sandbox")
    args = ap.parse_args()
    print(json.dumps(run(args.rows, args.state_dir, log=lambda m: print(m, file=sys.stderr, flush=True)), indent=2))


if __name__ == "__main__":
    main()
