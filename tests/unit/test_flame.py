"""The benchmark's flame graphs: waiting samples left out, boxes as wide as their share."""

import re

from bench.flame import fold, svg, top_frames

RAW = """\
run (bridge/node/replica.py:110);step (bridge/node/replica.py:200);run_script (bridge/apply/connection.py:88) 30
run (bridge/node/replica.py:110);step (bridge/node/replica.py:200);readinto (socket.py:706) 500
run (bridge/node/replica.py:110);_idle_wait (bridge/node/replica.py:126);wait_for_doorbell (bridge/transport/doorbell.py:33) 900
run (bridge/node/replica.py:110);step (bridge/node/replica.py:201);poll (bridge/ring/consumer.py:50) 10
_bootstrap (threading.py:995);ControlConnection.recv (bridge/wire/sockets.py:63) 400
"""


def test_samples_waiting_in_a_read_select_or_recv_are_left_out_and_lines_merge():
    stacks = fold(RAW)
    assert stacks == {("run (bridge/node/replica.py)", "step (bridge/node/replica.py)",
                       "run_script (bridge/apply/connection.py)"): 30,
                      ("run (bridge/node/replica.py)", "step (bridge/node/replica.py)",
                       "poll (bridge/ring/consumer.py)"): 10}
    assert top_frames(stacks) == [("run_script (bridge/apply/connection.py)", 75.0),
                                  ("poll (bridge/ring/consumer.py)", 25.0)]


def test_each_frame_is_a_box_as_wide_as_its_share_of_the_samples():
    image = svg(fold(RAW), "replica")
    widths = {title.split(":")[0]: float(width) for title, width in
              re.findall(r"<title>([^<]+)</title><rect x=\"[\d.]+\" y=\"\d+\" width=\"([\d.]+)\"", image)}
    assert widths["run (bridge/node/replica.py)"] == 1200.0
    assert widths["run_script (bridge/apply/connection.py)"] == 900.0
    assert widths["poll (bridge/ring/consumer.py)"] == 300.0
    assert "(40 samples)" in image and image.startswith("<svg")
