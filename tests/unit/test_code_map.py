"""docs/architecture.md's code map names every module of the package, each by its own
name (`name.py`, or a path ending in it), not as part of a longer one."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_code_map_names_every_module():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    code_map = doc[doc.index("## The code"):]
    named = set(re.findall(r"[`/]([\w.]+\.(?:py|pyx|pxd|pxi|h))`", code_map))
    unnamed = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "bridge").rglob("*"))
               if p.suffix in (".py", ".pyx", ".pxd", ".pxi", ".h") and p.name != "__init__.py" and p.name not in named]
    assert not unnamed, f"not in the code map of docs/architecture.md: {unnamed}"
