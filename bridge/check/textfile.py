"""A checksum run's outcome for Prometheus, as the node exporter's textfile collector
reads it (a ``.prom`` file in its directory, replaced whole so it never reads half of
one): when the last complete check ended, what it compared, how many chunks differ. The
alert rules in contrib/prometheus/alerts.yml fire on a check older than two days or on
any difference (pure, but for ``write``)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

FAMILIES = (  # (name, help, the run's field)
    ("rdma_bridge_checksum_last_complete_timestamp_seconds",
     "When the last complete consistency check (rdma-bridge checksum) ended, Unix time.", "ended"),
    ("rdma_bridge_checksum_tables", "Tables the last complete check compared.", "tables"),
    ("rdma_bridge_checksum_chunks", "Key-range chunks the last complete check compared.", "chunks"),
    ("rdma_bridge_checksum_rows", "Rows the last complete check hashed on the primary.", "rows"),
    ("rdma_bridge_checksum_differences", "Chunks that differ between the primary and the replica in the last "
     "complete check (recorded in rdma_bridge.checksum_diffs; `rdma-bridge repair` fixes them).", "differences"),
    ("rdma_bridge_checksum_duration_seconds", "How long the last complete check took.", "seconds"),
)


def render(channel: str, run, ended: float | None = None) -> str:
    """The text of one run (a ``ChecksumRun``) of ``channel``."""
    values = {"ended": time.time() if ended is None else ended, "tables": run.tables, "chunks": run.chunks,
              "rows": run.rows, "differences": len(run.mismatches), "seconds": round(run.seconds, 3)}
    label = channel.replace("\\", "\\\\").replace('"', '\\"')
    lines = []
    for name, doc, field in FAMILIES:
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f'{name}{{channel="{label}"}} {values[field]}']
    return "\n".join(lines) + "\n"


def write(path: str, text: str) -> None:
    """Replace ``path`` whole (a temporary file in its directory, renamed over it)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".rdma-bridge-", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
