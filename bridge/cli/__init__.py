"""Command line (click only here): ``main`` and its commands. The group and the shared
options are in ``options``, the commands that run things in ``nodes``, the ones that
observe, check and try a bridge in ``tools``."""

from __future__ import annotations

from bridge.cli import clone, nodes, tools
from bridge.cli.options import main

COMMANDS = (nodes.sandbox, nodes.start_replica, nodes.start_primary, tools.status, tools.report, tools.resume,
            tools.skip, tools.doctor, tools.tls_certs, tools.checksum, tools.repair, tools.verify, tools.workload,
            tools.demo, clone.clone)
for _command in COMMANDS:
    main.add_command(_command)

__all__ = ["main"]
