"""Checksum speed: `rdma-bridge checksum` (in-band through a running bridge, and
--offline) vs MariaDB's `CHECKSUM TABLE` on the same table, in one run.

    python -m bench.checksum [--rows 1000000]

Prints JSON: seconds per million rows for each, and ours over CHECKSUM TABLE.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.common import BENCH_SCHEMA, Bench
from bridge.check.checksum import Checksummer
from bridge.config import MysqlUrl


def run(rows: int, state_dir: str, log=print) -> dict:
    bench = Bench(state_dir)
    try:
        bench.start_bridge()
        with bench.primary.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {BENCH_SCHEMA}")
        bench.create_table(f"CREATE TABLE {BENCH_SCHEMA}.ck (id INT PRIMARY KEY, v INT, note VARCHAR(40), "
                           "d DATETIME NULL)")
        with bench.primary.cursor() as cur:
            cur.execute(f"INSERT INTO {BENCH_SCHEMA}.ck SELECT seq, seq % 1000, CONCAT('row ', seq), "
                        f"'2024-01-01 10:00:00' FROM {BENCH_SCHEMA}.seq_1_to_{rows}")
        bench.wait(bench.bridge_pos, bench.primary_pos(), alive=bench.bridge_alive)
        log(f"table of {rows} rows replicated")
        with bench.primary.cursor() as cur:
            t0 = time.perf_counter()
            cur.execute(f"CHECKSUM TABLE {BENCH_SCHEMA}.ck")
            native_s = time.perf_counter() - t0
        primary, replica = MysqlUrl.parse(bench.info["primary_admin"]), MysqlUrl.parse(bench.info["replica_admin"])
        out = {"benchmark": "checksum time per million rows", "rows": rows,
               "checksum_table_s_per_mrows": round(native_s / rows * 1e6, 3)}
        for mode, offline in (("in_band", False), ("offline", True)):
            checker = Checksummer(primary, replica, bench.channel, offline=offline, progress=lambda m: None)
            try:
                result = checker.run([BENCH_SCHEMA])
            finally:
                checker.close()
            assert not result.mismatches, result.mismatches
            out[f"{mode}_s_per_mrows"] = round(result.seconds / rows * 1e6, 3)
            out[f"{mode}_chunks"] = result.chunks
            out[f"ratio_{mode}_over_checksum_table"] = round(result.seconds / native_s, 1)
            log(f"{mode}: {result.seconds:.2f}s, {result.chunks} chunks (CHECKSUM TABLE {native_s:.2f}s)")
    finally:
        bench.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--state-dir", default=".sandbox")
    args = ap.parse_args()
    print(json.dumps(run(args.rows, args.state_dir, log=lambda m: print(m, file=sys.stderr)), indent=2))


if __name__ == "__main__":
    main()
