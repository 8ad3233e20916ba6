"""Access to the SQL files in the top-level ``sql/`` folder (grants, bridge schema): in a
checkout (or an editable install) beside the package, in an installed wheel among its
data files (``share/rdma-bridge/sql`` under the environment's prefix: setup.cfg)."""

from __future__ import annotations

import sys
from pathlib import Path

_PLACES = (Path(__file__).resolve().parents[2] / "sql", Path(sys.prefix) / "share" / "rdma-bridge" / "sql")
SQL_DIR = next((place for place in _PLACES if (place / "bridge_schema.sql").is_file()), _PLACES[0])


def sql_statements(name: str, **params: str) -> list[str]:
    """Statements of sql/NAME, placeholders filled, comments dropped."""
    text = (SQL_DIR / name).read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    body = "\n".join(lines).format(**params)
    return [s.strip() for s in body.split(";") if s.strip()]
