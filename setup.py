"""The compiled core (Cython), one extension module per .pyx under bridge/; all other
metadata is in setup.cfg.

The modules share declarations by .pxd and cimport (bridge/wire/native_c.pxd and
bridge_native.h, layouts.pxd, each module's own .pxd), never by textual include. They are
optional: where they cannot be built (no C compiler or Python headers) the install still
succeeds and the bridge runs their pure-Python twins (bridge.wire.native picks, and each
process says which in one log line at start).
"""

from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

NATIVE_H = ["bridge/wire"]  # bridge_native.h: the C every compiled module shares
MODULES = sorted(str(p.with_suffix("")).replace("/", ".") for p in Path("bridge").rglob("*.pyx"))

setup(ext_modules=cythonize([Extension(name, [name.replace(".", "/") + ".pyx"], include_dirs=NATIVE_H, optional=True)
                             for name in MODULES],
                            compiler_directives={"language_level": "3"}, quiet=True))
