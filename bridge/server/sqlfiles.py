"""Access to the SQL files in the top-level ``sql/`` folder (grants, bridge schema)."""

from __future__ import annotations

from pathlib import Path

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"


def sql_statements(name: str, **params: str) -> list[str]:
    """Statements of sql/NAME, placeholders filled, comments dropped."""
    text = (SQL_DIR / name).read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    body = "\n".join(lines).format(**params)
    return [s.strip() for s in body.split(";") if s.strip()]
