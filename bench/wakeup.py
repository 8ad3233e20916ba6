"""What one wakeup costs on this machine, measured (bench/c/wake.c): two processes
hand one byte back and forth over pipes; the woken side's CPU per handover. Paced at
one handover per millisecond it is what a process woken once per transaction at
1,000 txn/s pays in the kernel for that wakeup alone: the floor of a compiled
per-transaction loop is its wakeups per transaction times this.

    python -m bench.wakeup [--round-trips 5000] [--pace-us 1000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("c") / "wake.c"


def measure(round_trips: int = 5000, pace_us: int = 1000) -> float:
    """Microseconds of CPU per wakeup of the woken side; raises when no C compiler is there."""
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "wake"
        subprocess.run(["cc", "-O2", "-o", str(binary), str(SOURCE)], check=True)
        out = subprocess.run([str(binary), str(round_trips), str(pace_us)], check=True, capture_output=True, text=True)
    return float(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round-trips", type=int, default=5000)
    ap.add_argument("--pace-us", type=int, default=1000)
    args = ap.parse_args()
    print(json.dumps({"benchmark": "CPU per wakeup of the woken side", "pace_us": args.pace_us,
                      "us_per_wakeup": measure(args.round_trips, args.pace_us)}))


if __name__ == "__main__":
    main()
