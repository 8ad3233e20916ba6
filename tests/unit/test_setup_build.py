"""The install builds each compiled module it can and skips, with a warning naming it,
each it cannot: a host without verbs.h (libibverbs-dev) still installs, and that module's
pure-Python twin runs. Run against the repository's own setup.py on two small modules."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_module_that_cannot_compile_is_skipped_and_the_others_are_built(tmp_path):
    (tmp_path / "setup.py").write_text((ROOT / "setup.py").read_text())
    package = tmp_path / "bridge" / "probe"
    package.mkdir(parents=True)
    (tmp_path / "bridge" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "_fine.pyx").write_text("def answer():\n    return 42\n")
    (package / "_broken.pyx").write_text('cdef extern from "no_such_header_here.h":\n    int nothing\n'
                                         "def answer():\n    return nothing\n")
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "bridge.probe._broken not built, its pure-Python twin runs instead" in done.stderr
    assert list(package.glob("_fine*.so")) and not list(package.glob("_broken*.so"))
    loaded = subprocess.run([sys.executable, "-c", "from bridge.probe import _fine; print(_fine.answer())"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert loaded.stdout.strip() == "42", loaded.stderr
