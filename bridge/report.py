"""`rdma-bridge status` and `rdma-bridge report`: read both nodes' /status and show
them as a table, or draw each stage's latency distribution (log-scaled) as HTML+SVG."""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import urllib.error
import urllib.request

from bridge.metrics import PERCENTILES, buckets

STAGE_MEANING = {
    "place": "primary: ship start -> placed in the replica ring (flush done)",
    "deliver": "replica: ship start -> picked up by the consumer",
    "apply": "replica: picked up -> committed on the replica",
    "bridge": "replica: commit read from the binlog -> committed on the replica",
    "lag": "replica: heartbeat written on the primary -> committed on the replica",
}


def fetch_status(addresses: dict[str, str], timeout_s: float = 2.0) -> dict:
    nodes = {}
    for role, address in addresses.items():
        url = f"http://{address}/status"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - http to a node we name
                nodes[role] = json.load(resp)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            nodes[role] = {"error": f"{url}: {reason}"}
    return {"taken_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "nodes": nodes}


def _us(v: float) -> str:
    if v >= 1_000_000:
        return f"{v / 1e6:.2f} s"
    if v >= 1000:
        return f"{v / 1000:.2f} ms"
    return f"{v:.0f} µs"


COUNTER_LABELS = {
    "transactions_shipped": "transactions shipped", "transactions_applied": "transactions applied",
    "rows_applied": "rows applied (sql mode)", "row_events_applied": "row events applied (binlog mode)", "groups_applied": "replica commits (groups)", "applied_seq": "applied seq",
    "ring_backlog_frames": "ring backlog (frames)", "ring_backlog_bytes": "ring backlog (bytes)",
    "frames_resent": "frames resent after a link loss", "binlog_reopens": "binlog stream (re)opened",
    "reconnects": "reconnects", "corrupt_frames": "corrupt frames refused",
    "apply_conflicts": "parallel apply conflicts", "apply_effective_parallelism": "effective parallelism",
    "last_lag_seconds": "last heartbeat lag (s)",
}


def status_table(snapshot: dict) -> str:
    lines = [f"rdma-bridge status at {snapshot['taken_at']}"]
    for role, node in snapshot["nodes"].items():
        lines.append("")
        if "error" in node:
            lines.append(f"{role}: not answering ({node['error']})")
            continue
        if role == "primary":
            lines.append(f"primary side  {node['source']} -> replica bridge {node['replica']} over "
                         f"{node['transport']} ({'connected' if node['connected'] else 'NOT connected'})")
            lines.append(f"  {'last GTID shipped':34s}{node['last_gtid'] or '-'}")
            hb = node.get("heartbeat")
            lines.append(f"  {'heartbeat':34s}" + (f"{hb['state']}, every {hb['interval_s']}s, {hb['written']} written"
                                                 if hb else "off"))
            semi = node.get("semi_sync") or {"mode": "off"}
            if semi["mode"] == "off":
                lines.append(f"  {'semi-sync':34s}off")
            else:
                degraded = ", ".join(f"{r}: {n}" for r, n in semi["degradations"].items() if n) or "none"
                lines.append(f"  {'semi-sync':34s}{semi['mode']} mode, primary is {semi['state'].upper()}"
                             + (f" for {semi['async_streak_s']:.1f}s" if semi["state"] == "async" else ""))
                lines.append(f"  {'  degradations':34s}{degraded}; async {semi['async_total_s']:.1f}s in all, "
                             f"last: {semi['last_reason'] or '-'} at {semi['last_change'] or '-'}; "
                             f"{semi['acks_sent']} ACKs sent")
        else:
            lines.append(f"replica side  channel {node['channel']!r} into {node['target']}, listening on "
                         f"{node['listen']} ({node['transport']}, {node['workers']} apply worker(s), "
                         f"{'session open' if node['session'] else 'no session'})")
            lines.append(f"  {'replica holds':34s}{node['gtid_set'] or '-'}")
        for key, value in node["counters"].items():
            value = round(value, 6) if isinstance(value, float) else value
            lines.append(f"  {COUNTER_LABELS.get(key, key):34s}{value:>12}")
        stages = {k: v for k, v in node["stages"].items() if v["count"]}
        if stages:
            lines.append(f"  {'stage':10s}{'count':>10}{'p50':>12}{'p99':>12}{'p99.9':>12}{'max':>12}")
            for name, s in stages.items():
                lines.append(f"  {name:10s}{s['count']:>10}" + "".join(
                    f"{_us(s[k]):>12}" for k in ("p50", "p99", "p999", "max")))
        else:
            lines.append("  no latency samples yet")
    return "\n".join(lines)


def render_html(snapshot: dict) -> str:
    parts = [f"<html><head><meta charset='utf-8'><title>rdma-bridge latency report</title>"
             "<style>body{font-family:sans-serif;margin:2em} td,th{padding:2px 10px;text-align:right}"
             " .err{color:#a00}</style></head><body>",
             f"<h1>rdma-bridge latency report</h1><p>taken {html.escape(snapshot['taken_at'])}. "
             "Each chart: samples per log-spaced latency bucket (x: latency, log scale; y: share of samples); "
             "the lines mark P50, P99, P99.9 and max.</p>"]
    for role, node in snapshot["nodes"].items():
        parts.append(f"<h2>{role}</h2>")
        if "error" in node:
            parts.append(f"<p class='err'>not answering: {html.escape(node['error'])}</p>")
            continue
        for name, s in node["stages"].items():
            parts.append(f"<h3>{name} <small>({html.escape(STAGE_MEANING.get(name, ''))})</small></h3>")
            if not s["count"]:
                parts.append("<p>no samples</p>")
                continue
            parts.append("<table><tr><th>count</th>" + "".join(f"<th>{k}</th>" for k in ("p50", "p99", "p99.9", "max"))
                         + f"</tr><tr><td>{s['count']}</td>" + "".join(f"<td>{_us(s[k])}</td>" for k in
                                                                        ("p50", "p99", "p999", "max")) + "</tr></table>")
            parts.append(_svg(s))
    parts.append("</body></html>")
    return "".join(parts)


def _svg(s: dict, width: int = 720, height: int = 200) -> str:
    bins = buckets(s["hdr"])
    lo = math.floor(math.log10(max(1.0, bins[0][0])))
    hi = math.ceil(math.log10(max(bins[-1][1], s["max"] + 1)))
    hi = max(hi, lo + 1)
    total = sum(n for _, _, n in bins)
    top = max(n for _, _, n in bins) / total

    def x(v: float) -> float:
        return 40 + (math.log10(max(v, 1.0)) - lo) / (hi - lo) * (width - 60)

    out = [f"<svg width='{width}' height='{height + 30}' xmlns='http://www.w3.org/2000/svg'>"]
    for b_lo, b_hi, n in bins:
        h = n / total / top * height
        out.append(f"<rect x='{x(b_lo):.1f}' y='{height - h:.1f}' width='{max(1.0, x(b_hi) - x(b_lo) - 1):.1f}' "
                   f"height='{h:.1f}' fill='#4a7'><title>{_us(b_lo)}-{_us(b_hi)}: {n}</title></rect>")
    for decade in range(lo, hi + 1):
        px = x(10 ** decade)
        out.append(f"<line x1='{px:.1f}' x2='{px:.1f}' y1='0' y2='{height}' stroke='#ddd'/>"
                   f"<text x='{px:.1f}' y='{height + 14}' font-size='11' text-anchor='middle'>{_us(10 ** decade)}</text>")
    for key, color in (("p50", "#06c"), ("p99", "#c60"), ("p999", "#c00"), ("max", "#000")):
        px = x(s[key])
        out.append(f"<line x1='{px:.1f}' x2='{px:.1f}' y1='0' y2='{height}' stroke='{color}' stroke-dasharray='4 2'/>"
                   f"<text x='{px + 3:.1f}' y='{12 + 12 * list(PERCENTILES + (100.0,)).index(_p(key))}' "
                   f"font-size='11' fill='{color}'>{key} {_us(s[key])}</text>")
    out.append(f"<line x1='40' x2='{width - 20}' y1='{height}' y2='{height}' stroke='#000'/></svg>")
    return "".join(out)


def _p(key: str) -> float:
    return {"p50": 50.0, "p99": 99.0, "p999": 99.9, "max": 100.0}[key]
