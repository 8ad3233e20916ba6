"""Flame graphs of both bridge processes under the CPU benchmark's load: where a
replicated transaction's CPU goes, drawn from py-spy samples.

The bridge (binlog apply over shm, or --apply-mode) follows the sandbox primary while a paced client
offers RATE single-row transactions/s for SECONDS; py-spy samples each bridge
process (every thread). py-spy's own idle detection does not work on every kernel
(on the development VM it reports threads blocked in recv() as running), so samples
whose innermost frame is a known wait (a socket read, select, a lock or condition
wait, accept, sleep) are left out: what remains is the Python side's CPU, not the
kernel's work inside those calls. Writes <out>/<date>-flame-{primary,replica}.svg
and the folded stacks next to them (.folded, one "frame;frame;... count" per line).

    python -m bench.flame [--seconds 10] [--rate 1000] [--out bench/results]
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bench import cpu
from bench.common import Bench
from bridge.config import MysqlUrl

# innermost frames that wait (function name, and the file it is in where the name alone is too common)
WAITS = {("readinto", "socket.py"), ("select", "selectors.py"), ("wait", "threading.py"),
         ("_wait_for_tstate_lock", "threading.py"), ("accept", "socket.py"), ("recv", "sockets.py"),
         ("wait_for_doorbell", "doorbell.py"), ("sleep", ""), ("peek", "")}
WIDTH, ROW, FONT = 1200, 16, 11


def waiting(frame: str) -> bool:
    name, _, where = frame.partition(" (")
    name = name.rsplit(".", 1)[-1]
    return any(name == n and (not f or f in where) for n, f in WAITS)


def fold(raw: str) -> Counter:
    """py-spy raw output ("frame;frame;... count" per line) without the waiting samples."""
    stacks: Counter = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = tuple(f.rsplit(":", 1)[0] + ")" if f.endswith(")") else f for f in stack.split(";"))
        if not waiting(frames[-1]):
            stacks[frames] += int(count)
    return stacks


def svg(stacks: Counter, title: str) -> str:
    """A flame graph: one box per frame, as wide as its share of the samples, callers below."""
    total = sum(stacks.values()) or 1
    tree: dict = {}
    for frames, count in stacks.items():
        node = tree
        for f in frames:
            entry = node.setdefault(f, [0, {}])
            entry[0] += count
            node = entry[1]
    depth = max((len(f) for f in stacks), default=0)
    height = (depth + 3) * ROW
    boxes: list[str] = []

    def draw(node: dict, x: float, level: int) -> None:
        for frame, (count, children) in sorted(node.items()):
            w = count / total * WIDTH
            if w >= 0.3:
                y = height - (level + 2) * ROW
                hue = 10 + hash(frame.split(" (")[0]) % 50
                label = html.escape(frame)
                text = html.escape(frame.split(" (")[0])[: int(w / (FONT * 0.6))] if w > 30 else ""
                boxes.append(f'<g><title>{label}: {count} samples, {100 * count / total:.1f}%</title>'
                             f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{ROW - 1}" '
                             f'fill="hsl({hue},80%,60%)"/><text x="{x + 3:.1f}" y="{y + ROW - 4}">{text}</text></g>')
                draw(children, x, level + 1)
            x += w

    draw(tree, 0.0, 0)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'font-family="monospace" font-size="{FONT}">'
            f'<text x="4" y="{ROW}" font-size="{FONT + 2}">{html.escape(title)} ({total} samples)</text>'
            + "".join(boxes) + "</svg>")


def run(seconds: float, rate: int, state_dir: str, out: Path, log=print, apply_mode: str = "binlog") -> dict:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    bench = Bench(state_dir, "shm", extra_replica=("--apply-mode", apply_mode))
    date, found = dt.date.today().isoformat() + ("" if apply_mode == "binlog" else f"-{apply_mode}"), {}
    try:
        bench.start_bridge()
        cpu._tables(bench)
        raws = {role: out / f"{date}-flame-{role}.raw" for role in ("primary", "replica")}
        out.mkdir(parents=True, exist_ok=True)
        pids = {"primary": bench.bridge_primary.proc.pid, "replica": bench.bridge_replica.proc.pid}
        spies = [subprocess.Popen([spy, "record", "-p", str(pids[role]), "-d", str(int(seconds)), "-r", "250",
                                   "-f", "raw", "-o", str(raws[role])], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for role in raws]
        time.sleep(0.5)
        cpu.paced(MysqlUrl.parse(bench.info["primary_admin"]), cpu.WORKLOADS["single-row"], rate, seconds - 1,
                  50_000_000 + time.time_ns() % 10_000_000 * 10)
        for s in spies:
            s.wait()
        for role, raw in raws.items():
            stacks = fold(raw.read_text())
            raw.unlink()
            title = f"{role} side, {apply_mode} apply over shm, {rate} single-row txn/s, waits left out"
            (out / f"{date}-flame-{role}.svg").write_text(svg(stacks, title))
            (out / f"{date}-flame-{role}.folded").write_text(
                "".join(f"{';'.join(f)} {n}\n" for f, n in stacks.most_common()))
            found[role] = top_frames(stacks)
            log(f"{role}: {sum(stacks.values())} samples on CPU; most self time: {found[role][:3]}")
    finally:
        bench.stop()
    return found


def top_frames(stacks: Counter, n: int = 10) -> list[tuple[str, float]]:
    """The innermost frames with the most samples, as (frame, percent)."""
    leaves: Counter = Counter()
    for frames, count in stacks.items():
        leaves[frames[-1]] += count
    total = sum(leaves.values()) or 1
    return [(f, round(100 * c / total, 1)) for f, c in leaves.most_common(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--state-dir", default=".sandbox")
    ap.add_argument("--apply-mode", default="binlog", choices=("binlog", "sql", "relay"))
    args = ap.parse_args()
    run(args.seconds, args.rate, args.state_dir, Path(args.out),
        log=lambda m: print(m, file=sys.stderr, flush=True), apply_mode=args.apply_mode)


if __name__ == "__main__":
    main()
