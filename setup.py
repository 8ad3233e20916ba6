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
from setuptools.command.build_ext import build_ext

# bridge_native.h: the C every compiled module shares; bridge_verbs.h: the rdma transport's
# work requests (its header-only posting needs verbs.h to build, nothing to run)
NATIVE_H = ["bridge/wire", "bridge/transport"]
MODULES = sorted(str(p.with_suffix("")).replace("/", ".") for p in Path("bridge").rglob("*.pyx"))
# what a module links beyond Python: the compiled queue pair opens and closes through libibverbs
# (libibverbs-dev; without it that module is not built, and the rdma transport uses pyverbs)
LIBRARIES = {"bridge.transport._verbs": ["ibverbs"]}


class OptionalBuildExt(build_ext):
    """Builds each module it can and skips, with a warning, each it cannot (no verbs.h, no
    compiler): the install succeeds and that module's twin runs. setuptools' own filter for
    optional modules misses a compiler's failure in some releases (84: its CompileError is
    two classes, one under each name its distutils goes by), so each failure is caught here."""

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as failure:  # noqa: BLE001 (any failure of an optional module)
            if not ext.optional:
                raise
            self.warn(f"{ext.name} not built, its pure-Python twin runs instead: {failure}")


EXTENSIONS = cythonize([Extension(name, [name.replace(".", "/") + ".pyx"], include_dirs=NATIVE_H,
                                  libraries=LIBRARIES.get(name, [])) for name in MODULES],
                       compiler_directives={"language_level": "3"}, quiet=True)
for extension in EXTENSIONS:
    extension.optional = True  # set after cythonize, which makes new Extensions without it

setup(cmdclass={"build_ext": OptionalBuildExt}, ext_modules=EXTENSIONS)
