"""The local lab: MariaDB and MySQL servers started on this host or in containers built
here (``sandbox``, ``runners``, ``mycnf``, ``images``), the bridge's two ends run as
processes on free loopback ports (``procs``, ``ports``), the demo and the mixed workload.
The demo, the tests and the benchmarks use it; production code never imports it (an
import-linter contract in setup.cfg): only the CLI's lab commands reach it."""
