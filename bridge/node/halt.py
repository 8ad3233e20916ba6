"""Applying stopped on an error, the process kept (as a native replica stops its SQL
thread): what failed, since when, and the operator's two ways on, ``rdma-bridge
resume`` (retry it) and ``rdma-bridge skip --gtid G`` (skip exactly that transaction).

The replica side keeps its session while stopped: frames still arrive in the ring
until it is full, and the primary side, told that applying stopped, waits instead of
giving up. Pure: the node holds one ``Halt`` and asks it what to report.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

from bridge.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Halt:
    """The transaction applying stopped at."""

    seq: int
    gtid: str
    error: str  # the apply error, one line, naming the table or statement
    code: int  # the server's error number, 0 when none
    since: float  # wall clock, seconds
    skippable: bool = True  # False for a transaction cut in chunks (its chunks are gone from the ring)
    until: bool = False  # not an error: the replica reached start-replica --until-gtid

    def status(self) -> dict:
        return {"seq": self.seq, "gtid": self.gtid, "error": self.error, "code": self.code, "until": self.until,
                "since": dt.datetime.fromtimestamp(self.since, dt.timezone.utc).isoformat(timespec="seconds"),
                "stopped_for_s": round(time.time() - self.since, 1)}

    def message(self) -> dict:
        """What the primary side is told (control message ``apply_stopped``)."""
        return {"type": "apply_stopped", "seq": self.seq, "gtid": self.gtid, "code": self.code,
                "error": self.error, "until": self.until}

    def hint(self) -> str:
        if self.until:
            return "`rdma-bridge resume` applies on past it"
        skip = f", or `rdma-bridge skip --gtid {self.gtid}` to skip this one transaction" if self.skippable else ""
        return f"fix the cause and run `rdma-bridge resume`{skip}"

    def check_skip(self, gtid: str) -> None:
        """Only the failed transaction may be skipped, and only when it is whole."""
        if self.until:
            raise ConfigError(f"skip {gtid}: applying stopped at --until-gtid, not on an error; nothing to skip "
                              "(`rdma-bridge resume` applies on)")
        if gtid != self.gtid:
            raise ConfigError(f"skip {gtid}: applying stopped at {self.gtid} (seq {self.seq}); only that "
                              "transaction can be skipped")
        if not self.skippable:
            raise ConfigError(f"skip {gtid}: a transaction cut in chunks cannot be skipped here; fix the cause "
                              "and run `rdma-bridge resume`")
