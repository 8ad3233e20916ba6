"""`rdma-bridge status` and `rdma-bridge report`: read both nodes' /status and show
them as a table, or draw each stage's latency distribution (log-scaled) as HTML+SVG."""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import urllib.error
import urllib.request

from bridge.ops.metrics import buckets
from bridge.ops.statusdoc import StatusDocument
from bridge.transport.gids import said

STAGE_MEANING = {
    "place": "primary: ship start -> placed in the replica ring (flush done)",
    "ack": "primary: a semi-sync transaction placed -> its ACK sent (tcp: the replica side's answer first)",
    "deliver": "replica: ship start -> picked up by the consumer",
    "apply": "replica: picked up -> committed on the replica",
    "bridge": "replica: commit read from the binlog -> committed on the replica",
    "lag": "replica: heartbeat written on the primary -> committed on the replica",
    "gc": "either side: one pause of Python's garbage collector (the whole process waits)",
}


def fetch_status(addresses: dict[str, str], timeout_s: float = 2.0) -> dict:
    """{"taken_at", "nodes": {role: its status document (bridge.ops.statusdoc), or {"error": why}}}."""
    nodes: dict[str, StatusDocument | dict] = {}
    for role, address in addresses.items():
        url = f"http://{address}/status"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # http to a node the caller named
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
    "heartbeats_shipped": "heartbeat rows shipped", "heartbeats_applied": "heartbeat rows applied",
    "rows_applied": "rows applied (sql mode)", "row_events_applied": "row events applied (binlog mode)",
    "groups_applied": "replica commits (groups)", "applied_seq": "applied seq",
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
            lines.append(f"  {'replica behind the primary':34s}{_behind(node)}")
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
                             f"{semi['acks_sent']} ACKs sent, {semi.get('acks_skipped', 0)} skipped")
            for member in node.get("replicas") or ():
                lines.append(f"  {'replica ' + member['replica']:34s}{_member(member)}")
        else:
            lines.append(f"replica side  channel {node['channel']!r} into {node['target']}, listening on "
                         f"{node['listen']} ({node['transport']}, {node['workers']} apply worker(s), "
                         f"{'session open' if node['session'] else 'no session'})")
            lines.append(f"  {'replica holds':34s}{node['gtid_set'] or '-'}")
            lines.append(f"  {'applying':34s}{_applying(node.get('apply_stopped'), node.get('delay_s') or 0)}")
        if node.get("rdma"):
            lines.append(f"  {'rdma queue pair':34s}{said(node['rdma'])}")
        lines.append(f"  {'scheduling':34s}{node.get('scheduling', 'normal')}")  # --realtime-priority
        for key, value in node["counters"].items():
            value = round(value, 6) if isinstance(value, float) else value
            lines.append(f"  {COUNTER_LABELS.get(key, key):34s}{value:>12}")
        stages = {k: v for k, v in node["stages"].items() if v["count"]}
        if stages:
            lines.append(f"  {'stage':10s}{'count':>10}" + "".join(f"{label:>12}" for label in LABELS.values()))
            for name, s in stages.items():
                lines.append(f"  {name:10s}{s['count']:>10}" + "".join(f"{_us(s[k]):>12}" for k in LABELS))
                recent = s.get("last_minute")
                if recent is not None:  # since the start above, the last minute's samples here
                    lines.append(f"  {'  last 1m':10s}{recent['count']:>10}"
                                 + "".join(f"{_us(recent[k]) if recent['count'] else '-':>12}" for k in LABELS))
        else:
            lines.append("  no latency samples yet")
    return "\n".join(lines)


def _member(m: dict) -> str:
    """One replica side of a fan-out, in a line."""
    out = f"{m['state'].upper() if m['state'] != 'streaming' else 'streaming'} at {m['position']}, " \
          f"last {m['last_gtid'] or '-'}, {_seconds(m['behind_s'])} behind, ring backlog {m['ring_backlog_frames']} " \
          "frames"
    if m["queued_frames"]:
        out += f", {m['queued_frames']} frames ({m['queued_bytes']} bytes) wait in memory"
    if m.get("apply_stopped"):
        out += f"; applying STOPPED at {m['apply_stopped'].get('gtid')}"
    return out


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:g} s"


def _applying(stopped: dict | None, delay_s: float) -> str:
    if stopped and stopped.get("until"):
        return (f"STOPPED at seq {stopped['seq']} ({stopped['gtid']}) since {stopped['since']}: {stopped['error']}; "
                "`rdma-bridge resume` applies on past it")
    if stopped:
        return (f"STOPPED at seq {stopped['seq']} ({stopped['gtid']}) since {stopped['since']}: {stopped['error']}; "
                f"fix the cause and run `rdma-bridge resume`, or `rdma-bridge skip --gtid {stopped['gtid']}`")
    return f"running, {delay_s:g}s behind the primary on purpose (--delay)" if delay_s else "running"


def _behind(node: dict) -> str:
    """The primary side's view: how much the replica lacks, and when it will not
    (stopped or delayed on purpose: no ETA; caught up: said so)."""
    b = node.get("behind")
    if not b:
        return "- (measured once a second)"
    rates = (f"; applying {b['apply_rate_tps']} txn/s, the primary writes {b['write_rate_tps']} txn/s"
             if b.get("apply_rate_tps") is not None else "")
    eta, stopped, delay = b.get("catch_up_eta_s"), node.get("apply_stopped"), node.get("replica_delay_s") or 0
    if stopped:
        when = f"; applying is STOPPED on the replica at {stopped.get('gtid')} (no ETA)"
    elif delay:
        when = f"; the replica applies {delay:g}s behind on purpose (--delay)"
    elif eta == 0:
        when = "; caught up"
    else:
        when = f"; caught up in ~{eta:.0f}s" if eta is not None else "; not catching up at these rates"
    return f"{b['transactions']} transactions, {b['bytes']} bytes{rates}{when}"


LABELS = {"p50": "P50", "p99": "P99", "p999": "P99.9", "max": "max"}  # one naming, chart and table alike
COLORS = {"p50": "#1f6fd1", "p99": "#d97a00", "p999": "#c4122f", "max": "#222"}
CHART = {"width": 1000, "height": 250, "left": 78, "right": 24, "top": 34, "bottom": 52, "font": 13}


def render_html(snapshot: dict) -> str:
    """Every stage of both nodes on one shared log-scaled latency axis, so stages can be
    compared at a glance; each chart full width with its y scale, axis titles, and the
    P50/P99/P99.9/max lines named in a legend row above the plot (never on top of each
    other). Raises ValueError for a document that is not a status snapshot."""
    nodes = _nodes(snapshot)
    stages = [s for node in nodes.values() if "error" not in node for s in node["stages"].values() if s["count"]]
    domain = axis_domain(stages)
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>rdma-bridge latency report</title>"
             "<style>body{font-family:sans-serif;margin:1.5em 2em} svg{width:100%;height:auto;display:block} "
             "table{border-collapse:collapse} td,th{padding:2px 12px;text-align:right} .err{color:#a00}</style>"
             "</head><body>",
             f"<h1>rdma-bridge latency report</h1><p>Taken {html.escape(str(snapshot.get('taken_at', '?')))}. "
             "Each chart shows one stage's samples per log-spaced latency bucket (share of its samples), all on the "
             f"same latency axis ({_decade(domain[0])} to {_decade(domain[1])}, log scale); the dashed lines "
             "mark P50, P99, P99.9 and the maximum.</p>"]
    for role, node in nodes.items():
        parts.append(f"<h2>{html.escape(role)} side</h2>")
        if "error" in node:
            parts.append(f"<p class='err'>not answering: {html.escape(str(node['error']))}</p>")
            continue
        members = node.get("replicas") or ()
        if members:  # fan-out: where each replica side stands
            parts.append("<table><tr><th>replica side</th><th>state</th><th>position</th><th>last GTID</th>"
                         "<th>behind</th><th>ring backlog</th><th>waiting in memory</th></tr>" + "".join(
                             f"<tr><td>{html.escape(m['replica'])}</td><td>{html.escape(m['state'])}</td>"
                             f"<td>{html.escape(m['position'])}</td><td>{html.escape(m['last_gtid'] or '-')}</td>"
                             f"<td>{_seconds(m['behind_s'])}</td><td>{m['ring_backlog_frames']} frames</td>"
                             f"<td>{m['queued_bytes']} bytes</td></tr>"
                             for m in members) + "</table>")
        for name, s in node["stages"].items():
            parts.append(f"<h3>{html.escape(name)} <small>({html.escape(STAGE_MEANING.get(name, ''))})</small></h3>")
            if not s["count"]:
                parts.append("<p>no samples yet</p>")
                continue
            recent = s.get("last_minute") or {"count": 0}
            parts.append("<table><tr><th></th><th>samples</th>" + "".join(f"<th>{LABELS[k]}</th>" for k in LABELS)
                         + f"</tr><tr><td>since start</td><td>{s['count']}</td>"
                         + "".join(f"<td>{_us(s[k])}</td>" for k in LABELS)
                         + f"</tr><tr><td>last minute</td><td>{recent['count']}</td>"
                         + "".join(f"<td>{_us(recent[k]) if recent['count'] else '-'}</td>" for k in LABELS)
                         + "</tr></table>")
            parts.append(svg_chart(s, domain))
    parts.append("</body></html>")
    return "".join(parts)


def _nodes(snapshot: dict) -> dict:
    nodes = snapshot.get("nodes") if isinstance(snapshot, dict) else None
    if not isinstance(nodes, dict) or not all(isinstance(n, dict) and ("error" in n or "stages" in n)
                                              for n in nodes.values()):
        raise ValueError("not a status snapshot: expected {\"nodes\": {role: status}} as `rdma-bridge status "
                         "--json` writes it")
    return nodes


def axis_domain(stages: list[dict]) -> tuple[int, int]:
    """The decades (log10 µs) every chart spans: from the smallest sample of any stage
    to the largest, at least one decade."""
    if not stages:
        return 0, 3
    lows = [buckets(s["hdr"])[0][0] for s in stages]
    lo = math.floor(math.log10(max(1.0, min(lows))))
    hi = math.ceil(math.log10(max(s["max"] for s in stages) + 1))
    return lo, max(hi, lo + 1)


def svg_chart(s: dict, domain: tuple[int, int]) -> str:
    return "".join(_svg_parts(s, domain))


def _svg_parts(s: dict, domain: tuple[int, int]):
    c = CHART
    width, height, left, top = c["width"], c["height"], c["left"], c["top"]
    plot_w, plot_h = width - left - c["right"], height - top - c["bottom"]
    lo, hi = domain
    bins = buckets(s["hdr"])
    total = sum(n for _, _, n in bins)
    top_share = _nice(max(n for _, _, n in bins) / total)

    def x(v: float) -> float:
        return left + (math.log10(max(v, 1.0)) - lo) / (hi - lo) * plot_w

    def y(share: float) -> float:
        return top + plot_h - share / top_share * plot_h

    yield (f"<svg viewBox='0 0 {width} {height}' xmlns='http://www.w3.org/2000/svg' font-size='{c['font']}' "
           "font-family='sans-serif'>")
    for tick in (0.0, top_share / 2, top_share):
        yield (f"<line x1='{left}' x2='{left + plot_w}' y1='{y(tick):.1f}' y2='{y(tick):.1f}' stroke='#e4e4e4'/>"
               f"<text x='{left - 6}' y='{y(tick) + 4:.1f}' text-anchor='end'>{tick * 100:g} %</text>")
    for decade in range(lo, hi + 1):
        px = x(10 ** decade)
        yield (f"<line x1='{px:.1f}' x2='{px:.1f}' y1='{top}' y2='{top + plot_h}' stroke='#e4e4e4'/>"
               f"<text x='{px:.1f}' y='{top + plot_h + 17}' text-anchor='middle'>{_decade(decade)}</text>")
    for b_lo, b_hi, n in bins:
        yield (f"<rect x='{x(b_lo):.1f}' y='{y(n / total):.1f}' width='{max(1.0, x(b_hi) - x(b_lo) - 1):.1f}' "
               f"height='{y(0) - y(n / total):.1f}' fill='#5aa87a'><title>{_us(b_lo)} to {_us(b_hi)}: {n} samples"
               "</title></rect>")
    for i, (key, label) in enumerate(LABELS.items()):
        px = x(s[key])
        yield (f"<line x1='{px:.1f}' x2='{px:.1f}' y1='{top}' y2='{top + plot_h}' stroke='{COLORS[key]}' "
               "stroke-width='2' stroke-dasharray='6 3'/>"
               f"<rect x='{left + i * plot_w / 4:.1f}' y='8' width='18' height='4' fill='{COLORS[key]}'/>"
               f"<text x='{left + i * plot_w / 4 + 24:.1f}' y='15' fill='{COLORS[key]}'>{label} {_us(s[key])}</text>")
    yield (f"<line x1='{left}' x2='{left + plot_w}' y1='{top + plot_h}' y2='{top + plot_h}' stroke='#000'/>"
           f"<line x1='{left}' x2='{left}' y1='{top}' y2='{top + plot_h}' stroke='#000'/>"
           f"<text x='{left + plot_w / 2:.1f}' y='{height - 8}' text-anchor='middle'>latency (log scale)</text>"
           f"<text transform='translate(16 {top + plot_h / 2:.1f}) rotate(-90)' text-anchor='middle'>"
           "share of samples</text></svg>")


def _decade(decade: int) -> str:
    """10^decade µs as an axis label: 1 µs, 10 µs, ..., 1 ms, ..., 1 s, 10 s."""
    for unit, exp in (("s", 6), ("ms", 3), ("µs", 0)):
        if decade >= exp:
            return f"{10 ** (decade - exp)} {unit}"
    return f"{10 ** decade} µs"


def _nice(share: float) -> float:
    """The y scale's top: the next of 1, 2, 5 x 10^k above the tallest bar."""
    exp = math.floor(math.log10(share))
    for step in (1, 2, 5, 10):
        if step * 10 ** exp >= share:
            return step * 10 ** exp
    return 10 ** (exp + 1)
