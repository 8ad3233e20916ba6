"""Command line (click only here): ``main`` and its commands. The group and the shared
options are in ``options``; the commands that run the two ends in ``nodes``, those that
watch and operate them in ``control``, those that check in ``check``, ``clone`` in its
own, and the lab's (sandbox, workload, demo) in ``lab``."""

from __future__ import annotations

from bridge.cli import check, clone, control, lab, nodes
from bridge.cli.options import main

COMMANDS = (lab.sandbox, nodes.start_replica, nodes.start_primary, control.status, control.report, control.resume,
            control.skip, check.doctor, check.tls_certs, check.checksum, check.repair, check.verify, lab.workload,
            lab.demo, clone.clone)
for _command in COMMANDS:
    main.add_command(_command)

__all__ = ["main"]
