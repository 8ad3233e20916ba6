"""`make fuzz`: feed every decoder of the wire and ring many inputs (valid encodings
mutated: flipped bits, truncations, splices, random bytes) and require that each one
yields a value or the protocol error type, never another exception or a hang.

    python -m tests.fuzz_decoders [--inputs 1000000] [--seed N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import time
from decimal import Decimal

from bridge.errors import ProtocolError
from bridge.model import BitValue, Chunk, InvalidTemporal, RowChange, RowEvents, Statement, Transaction
from bridge.ring.consumer import RingConsumer
from bridge.ring.layout import init_region, region_bytes, write_publish
from bridge.wire import codec, control, mysqljson, placement, tablemap
from bridge.wire.frame import Frame, FrameKind, encode_frame
from tests.unit.test_binlog_events import FDE, QUERY, TABLE_MAP, USER_VAR_STR, WRITE  # captured from MariaDB 10.11

SLOW_INPUT_S = 1.0  # one input taking this long counts as a hang



def seeds(rng: random.Random) -> list[tuple[str, bytes]]:
    row = RowChange("update", "db", "t", ("id", "v", "d", "b"), ("id",),
                    (1, "é", Decimal("1.50"), b"\x00"), (2, None, dt.datetime(2024, 1, 2, 3, 4, 5, 6), BitValue(5, 3)))
    txn = Transaction("0-1-7", (row, Statement("db", "ALTER TABLE t ADD c INT"),
                                RowChange("insert", "db", "t", ("x",), (), None, (InvalidTemporal("0000-00-00"),))))
    raw = Transaction("0-1-9", (RowEvents(TABLE_MAP + WRITE, (("cap", "t"),), 1),
                                Statement("", "INSERT", USER_VAR_STR + QUERY)), format_event=FDE)
    return [("txn", codec.encode_transaction(txn)),
            ("txn", codec.encode_transaction(raw)),
            ("txn", codec.encode_transaction(Transaction("0-1-10", (raw.changes[0],), format_event=FDE))),
            ("row_events", TABLE_MAP + WRITE),
            ("query", USER_VAR_STR + QUERY),
            ("chunk", codec.encode_chunk(Chunk("0-1-8", 3, True, txn.changes))),
            ("control", control.encode_message(control.hello("control", transport="tcp", start_gtid="0-1-1"))),
            ("placement", placement.encode_write(64, b"abc") + placement.encode_publish(9, 128)),
            ("placement", placement.ANSWER + placement.encode_publish(3, 64, answer=True)),
            ("frame", encode_frame(Frame(FrameKind.TXN, 1, codec.encode_transaction(txn)))),
            ("mysql_json", b"\x00\x01\x00\x0c\x00\x0b\x00\x01\x00\x04\x01\x00k"),
            ("mysql_json", b"\x02\x02\x00\x0c\x00\x05\x01\x00\x0c\x0a\x00\x01a")]


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        if op == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            del b[rng.randrange(len(b)):]
        elif op == 2:
            b[rng.randrange(len(b) + 1):rng.randrange(len(b) + 1)] = rng.randbytes(rng.randrange(1, 16))
        elif op == 3 and b:
            b[rng.randrange(len(b))] = rng.choice([0, 0xFF, 0x7F, 0x80])
        else:
            b = bytearray(rng.randbytes(rng.randrange(64)))
    return bytes(b)


def ring_poll(data: bytes) -> None:
    size = 4096
    region = bytearray(region_bytes(size))
    init_region(region, size)
    region[64:64 + min(len(data), size)] = data[:size]
    write_publish(region, 1, 0)
    RingConsumer(memoryview(region)).poll()


def walk_rows(data: bytes) -> None:
    list(tablemap.rows_of(data, 4))


class _EveryCollation(dict):
    """A replica that knows every collation id (the decoder, not the replica's lookup, is fuzzed)."""

    def get(self, _key, _default=None):
        return ("utf8mb4_general_ci", "utf8mb4")


def replay_query(data: bytes) -> None:
    from bridge.apply import replay  # the replica's reader of raw statements (pure)

    replay.statements(data, 4, True, replay.ReplicaCollations(_EveryCollation()))


TARGETS = {
    "txn": codec.decode_transaction,
    "row_events": walk_rows,
    "query": replay_query,
    "chunk": codec.decode_chunk,
    "control": lambda d: control.MessageDecoder().feed(d),
    "placement": lambda d: placement.parse_head(d[:placement.HEAD.size].ljust(placement.HEAD.size, b"\0"), 4160),
    "frame": ring_poll,
    "mysql_json": mysqljson.to_text,
}


def run(inputs: int, seed: int) -> dict:
    rng = random.Random(seed)
    corpus = seeds(rng)
    counts = {"value": 0, "protocol_error": 0}
    started = time.monotonic()
    for i in range(inputs):
        name, data = corpus[i % len(corpus)]
        sample = mutate(rng, data)
        t = time.monotonic()
        try:
            TARGETS[name](sample)
            counts["value"] += 1
        except ProtocolError:
            counts["protocol_error"] += 1
        except Exception as exc:  # the finding: report it with the input that caused it
            raise SystemExit(f"fuzz: {name} decoder raised {type(exc).__name__}: {exc}\ninput: {sample!r}") from exc
        if time.monotonic() - t > SLOW_INPUT_S:
            raise SystemExit(f"fuzz: {name} decoder took over {SLOW_INPUT_S}s on input {sample!r}")
    return {"inputs": inputs, "seed": seed, "seconds": round(time.monotonic() - started, 1), **counts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    print(run(args.inputs, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
