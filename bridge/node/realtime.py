"""``--realtime-priority``: a bridge process under SCHED_FIFO.

A semi-sync ACK waits for the bridge's threads to be scheduled: over shm once (the
primary side woken by the primary's event), over tcp three times (the primary side, the
replica side's receiver, the primary side again). On a busy host each wakeup of a normal
(SCHED_OTHER) thread can wait milliseconds for a CPU behind the servers and the clients,
and the primary stops waiting after ``rpl_semi_sync_master_timeout``. A SCHED_FIFO thread
runs as soon as it is woken, before every normal one. The bridge's threads sleep in
``poll``/``recv`` between transactions, so this costs the servers only the bridge's own
work; the kernel keeps 5% of each CPU for normal tasks all the same
(``/proc/sys/kernel/sched_rt_runtime_us``).
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("bridge")


def enter(priority: int) -> bool:
    """Every thread of this process, and every thread it starts later, under
    SCHED_FIFO at ``priority`` (1-99). Said in the log either way: True when done; False
    when refused (no root or CAP_SYS_NICE, or not Linux), the process then runs on at
    normal priority."""
    try:
        param = os.sched_param(priority)
        for task in sorted(os.listdir("/proc/self/task")):
            os.sched_setscheduler(int(task), os.SCHED_FIFO, param)  # Linux: one thread; new ones inherit it
    except (AttributeError, OSError) as exc:
        why = "needs root or CAP_SYS_NICE (systemd: CPUSchedulingPolicy=fifo)" \
            if isinstance(exc, PermissionError) else str(exc) or type(exc).__name__
        log.warning("realtime: SCHED_FIFO priority %d refused (%s): running at normal priority", priority, why)
        return False
    log.info("realtime: every thread under SCHED_FIFO priority %d", priority)
    return True


def scheduling() -> str:
    """How this process's main thread is scheduled, for ``status``: "SCHED_FIFO <priority>"
    under ``--realtime-priority``, else "normal"."""
    try:
        if os.sched_getscheduler(os.getpid()) == os.SCHED_FIFO:
            return f"SCHED_FIFO {os.sched_getparam(os.getpid()).sched_priority}"
    except (AttributeError, OSError):
        pass
    return "normal"
