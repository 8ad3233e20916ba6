"""The HTML latency report: every stage on one shared log-scaled µs axis with labels
and units, one naming (P50, P99, P99.9, max), no label on top of another, full width;
rendered for real in headless Chromium when it is installed (`make test` installs it)."""

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from bridge.ops.metrics import Stages
from bridge.ops.report import CHART, render_html

SVG = "{http://www.w3.org/2000/svg}"


def snapshot() -> dict:
    primary, replica = Stages(["place"]), Stages(["deliver", "apply", "lag"])
    for i in range(2000):
        primary.record("place", 20 + i % 30)
        replica.record("deliver", 150 + i % 400)
        replica.record("apply", 300 + (i * 37) % 900 + (40_000 if i % 500 == 0 else 0))
        replica.record("lag", 900 + (i * 13) % 3000)
    return {"taken_at": "2026-12-01T00:00:00+00:00",
            "nodes": {"primary": {"stages": primary.summary()}, "replica": {"stages": replica.summary()},
                      "gone": {"error": "http://127.0.0.1:1/status: refused"}}}


def charts(page: str) -> list[ET.Element]:
    return [ET.fromstring(svg) for svg in re.findall(r"<svg .*?</svg>", page)]


def text_boxes(svg: ET.Element) -> list[tuple[float, float, float, float, str]]:
    """Approximate boxes of the horizontal texts (x0, y0, x1, y1, text)."""
    font = CHART["font"]
    out = []
    for t in svg.iter(f"{SVG}text"):
        if "transform" in t.attrib:
            continue  # the rotated y title, alone at the left
        width = len(t.text) * font * 0.6
        x, y = float(t.attrib["x"]), float(t.attrib["y"])
        anchor = t.attrib.get("text-anchor", "start")
        x0 = x - width if anchor == "end" else x - width / 2 if anchor == "middle" else x
        out.append((x0, y - font, x0 + width, y, t.text))
    return out


def test_one_shared_axis_with_units_one_naming_and_no_overlapping_labels():
    page = render_html(snapshot())
    svgs = charts(page)
    assert len(svgs) == 4
    ticks = [[t.text for t in svg.iter(f"{SVG}text") if t.attrib.get("text-anchor") == "middle" and
              "transform" not in t.attrib and t.text != "latency (log scale)"] for svg in svgs]
    assert all(t == ticks[0] for t in ticks) and ticks[0][0] == "10 µs" and ticks[0][-1] == "100 ms"
    for svg in svgs:
        texts = [t.text for t in svg.iter(f"{SVG}text")]
        assert "latency (log scale)" in texts and "share of samples" in texts
        assert any(t.endswith(" %") for t in texts)
        assert [t.split()[0] for t in texts if t.split()[0] in ("P50", "P99", "P99.9", "max")] == \
            ["P50", "P99", "P99.9", "max"]
        boxes = text_boxes(svg)
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
    assert "p999" not in page and page.count("<th>P99.9</th>") == 4 and "not answering" in page


def test_not_a_snapshot_is_refused():
    with pytest.raises(ValueError, match="not a status snapshot"):
        render_html({"rows": []})


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (make test installs it)")
def test_the_report_renders_full_width_in_headless_chromium(tmp_path):
    from PIL import Image

    page, shot = tmp_path / "report.html", tmp_path / "report.png"
    page.write_text(render_html(snapshot()), encoding="utf-8")
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", f"--screenshot={shot}",
                    "--window-size=1280,1600", page.as_uri()], check=True, capture_output=True, timeout=60,
                   env={**os.environ, "HOME": str(tmp_path)})
    image = Image.open(shot).convert("RGB")
    width, height = image.size
    pixels = image.load()
    green = [(x, y) for y in range(0, height, 2) for x in range(0, width, 2) if pixels[x, y] == (0x5a, 0xa8, 0x7a)]
    assert len(green) > 2000  # the bars were drawn
    dark = {x for y in range(0, height, 3) for x in range(width) if sum(pixels[x, y]) < 200}
    assert max(dark) - min(dark) > 0.85 * width  # the charts use the page's width


def test_status_says_what_goes_on_stopped_delayed_or_caught_up():
    from bridge.ops.report import status_table

    behind = {"transactions": 1, "bytes": 90, "apply_rate_tps": 10.0, "write_rate_tps": 10.0, "catch_up_eta_s": 0.0}
    primary = {"source": "mysql://u:***@p:1", "replica": "r:2", "transport": "tcp", "connected": True,
               "last_gtid": "0-1-9", "behind": behind, "apply_stopped": None, "replica_delay_s": 0.0,
               "heartbeat": None, "semi_sync": {"mode": "off"}, "counters": {}, "stages": {}}
    replica = {"channel": "c", "target": "mysql://u:***@r:3", "listen": "r:2", "transport": "tcp", "workers": 1,
               "session": True, "gtid_set": "0-1-9", "delay_s": 0.0, "counters": {}, "stages": {},
               "apply_stopped": {"seq": 9, "gtid": "0-1-9", "error": "reached --until-gtid 0-1-9", "until": True,
                                 "since": "now"}}

    def table(primary_node, replica_node):
        return status_table({"taken_at": "now", "nodes": {"primary": primary_node, "replica": replica_node}})
    idle = table(primary, replica)
    assert "1 transactions, 90 bytes" in idle and "; caught up" in idle and "not catching up" not in idle
    assert "`rdma-bridge resume` applies on past it" in idle and "skip --gtid" not in idle  # --until-gtid
    stopped = table({**primary, "apply_stopped": {"seq": 9, "gtid": "0-1-9"}, "behind": {**behind, "transactions": 50,
                                                                                          "catch_up_eta_s": 1.0}},
                    {**replica, "apply_stopped": None, "delay_s": 5.0})
    assert "applying is STOPPED on the replica at 0-1-9 (no ETA)" in stopped and "caught up in" not in stopped
    assert "running, 5s behind the primary on purpose (--delay)" in stopped
    delayed = table({**primary, "replica_delay_s": 5.0, "behind": {**behind, "transactions": 50,
                                                                    "catch_up_eta_s": None}}, replica)
    assert "the replica applies 5s behind on purpose (--delay)" in delayed and "not catching up" not in delayed
    assert "scheduling                        normal" in delayed  # a document from before the field: normal
    fifo = table({**primary, "scheduling": "SCHED_FIFO 10"}, {**replica, "scheduling": "normal"})
    assert fifo.count("scheduling                        SCHED_FIFO 10") == 1 and "scheduling" + " " * 24 + "normal" in fifo


def test_status_and_report_show_the_last_minute_beside_the_lifetime():
    from bridge.ops.report import render_html, status_table

    snap = snapshot()
    replica = {"channel": "c", "target": "mysql://u:***@r:3", "listen": "r:2", "transport": "tcp", "workers": 1,
               "session": True, "gtid_set": "", "delay_s": 0.0, "counters": {}, "apply_stopped": None,
               "stages": snap["nodes"]["replica"]["stages"]}
    lines = status_table({"taken_at": "now", "nodes": {"replica": replica}}).splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("apply "))
    assert lines[at + 1].split()[:3] == ["last", "1m", "2000"]  # every sample of snapshot() is a few ms old
    page = render_html(snap)
    assert page.count("<td>last minute</td><td>2000</td>") == 4 == page.count("<td>since start</td><td>2000</td>")
