import time

from bridge.node.progress import Progress


def test_progress_reports_once_per_interval_with_the_count_since_the_last():
    p = Progress(interval_s=0.05)
    assert p.due(10) is None
    time.sleep(0.06)
    done, elapsed = p.due(25)
    assert done == 25 and elapsed >= 0.05
    assert p.due(30) is None
    time.sleep(0.06)
    assert p.due(30)[0] == 5
