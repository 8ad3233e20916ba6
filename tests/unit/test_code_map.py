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


def test_the_compiled_core_shares_by_cimport_never_by_include():
    sources = sorted((ROOT / "bridge").rglob("*.py[xi]")) + sorted((ROOT / "bridge").rglob("*.pxd"))
    including = [str(p.relative_to(ROOT)) for p in sources if re.search(r"^\s*include\s+['\"]", p.read_text(), re.M)]
    assert not including and not list((ROOT / "bridge").rglob("*.pxi")), including


def test_no_source_file_is_over_600_lines_and_the_top_holds_few_modules():
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "bridge").rglob("*") if p.suffix in (".py", ".pyx", ".pxd")
            for n in [len(p.read_text().splitlines())] if n > 600}
    assert not long, long
    top = sorted(p.name for p in (ROOT / "bridge").glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "config.py", "errors.py", "model.py"], top
