"""The compiled hot path (bridge/wire/_hotpath.pyx, Cython); all other metadata is in setup.cfg.

The extension is optional: where it cannot be built (no C compiler or Python headers)
the install still succeeds and the bridge runs its pure-Python twin
(bridge/wire/hotpath.py), saying so in one log line at start.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize([Extension("bridge.wire._hotpath", ["bridge/wire/_hotpath.pyx"], optional=True)],
                            compiler_directives={"language_level": "3"}, quiet=True))
