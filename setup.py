"""The compiled hot path (bridge/wire/_hotpath.pyx), tcp receiver loop
(bridge/transport/_receiver.pyx), apply lane (bridge/apply/_lane.pyx) and ship lane
(bridge/source/_ship.pyx), Cython; all other metadata is in setup.cfg.

The extensions are optional: where they cannot be built (no C compiler or Python
headers) the install still succeeds and the bridge runs their pure-Python twins
(bridge/wire/hotpath.py, bridge/transport/receiver.py, bridge/apply/lane.py, bridge/source/ship.py), saying so in
one log line at start.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

NATIVE_H = ["bridge/wire"]  # bridge_native.h (and _frames.pxi): C the compiled modules share

setup(ext_modules=cythonize([Extension("bridge.wire._hotpath", ["bridge/wire/_hotpath.pyx"], include_dirs=NATIVE_H,
                                       optional=True),
                             Extension("bridge.transport._receiver", ["bridge/transport/_receiver.pyx"],
                                       optional=True),
                             Extension("bridge.apply._lane", ["bridge/apply/_lane.pyx"], include_dirs=NATIVE_H,
                                       optional=True),
                             Extension("bridge.source._ship", ["bridge/source/_ship.pyx"], include_dirs=NATIVE_H,
                                       optional=True)],
                            compiler_directives={"language_level": "3"}, quiet=True))
