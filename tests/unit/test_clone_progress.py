"""Clone's progress lines, its throttle's arithmetic and the deferred indexes' cut (no server: the copy itself is
tested against the sandbox in tests/integration/test_clone.py)."""

from bridge.clone import run as clone_run
from bridge.clone.rows import TableShape
from bridge.clone.schema import without_secondary_indexes


def test_progress_says_rows_bytes_rate_and_eta_then_the_total():
    lines = []
    progress = clone_run.Progress(lines.append)
    shape = TableShape("app", "t", ("id",), "CONCAT('(', QUOTE(`id`), ')')", estimated_rows=1000, row_bytes=10)
    now = clone_run.time.monotonic()
    progress.table(shape, 250, 2_500_000, started=now - 1.0)
    progress.table(shape, 300, 3_000_000, started=now - 1.0)  # within PROGRESS_EVERY_S: not said
    progress.table(shape, 1000, 10_000_000, started=now - 4.0, done=True)  # the end is always said
    assert len(lines) == 2
    assert lines[0].startswith("app.t: 250 of ~1,000 rows, 2.5 MB, ") and "s left" in lines[0]
    assert lines[1].startswith("app.t: 1,000 rows, 10.0 MB in 4.0s (250 rows/s, 2.5 MB/s)")


def test_throttle_spaces_batches_to_the_row_rate(monkeypatch):
    slept = []
    monkeypatch.setattr(clone_run.time, "sleep", slept.append)
    throttle = clone_run.Throttle(rows_per_s=1000)
    throttle.account(500, batch_s=0.01)
    throttle.account(500, batch_s=0.01)
    # (no time passes here) the first 500 rows are due at +0.5 s, the next 500 at +1.0 s
    assert [round(s, 2) for s in slept] == [0.5, 1.0]
    slept.clear()
    clone_run.Throttle(rows_per_s=0).account(10_000, batch_s=3.0)  # no limit, but a slow batch: wait as long
    assert slept == [3.0]


def test_secondary_indexes_are_cut_from_the_create_and_kept_for_later():
    create = ("CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `v` varchar(40) DEFAULT NULL,\n  `w` text,\n"
              "  PRIMARY KEY (`id`),\n  KEY `v` (`v`),\n  UNIQUE KEY `u` (`v`,`id`),\n  FULLTEXT KEY `ft` (`w`)\n"
              ") ENGINE=InnoDB DEFAULT CHARSET=latin1")
    table, indexes = without_secondary_indexes(create)
    assert table == ("CREATE TABLE `t` (\n  `id` int(11) NOT NULL,\n  `v` varchar(40) DEFAULT NULL,\n  `w` text,\n"
                     "  PRIMARY KEY (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=latin1")
    assert indexes == ["KEY `v` (`v`)", "UNIQUE KEY `u` (`v`,`id`)", "FULLTEXT KEY `ft` (`w`)"]
    with_fk = create.replace("  FULLTEXT KEY `ft` (`w`)", "  CONSTRAINT `f` FOREIGN KEY (`v`) REFERENCES `p` (`v`)")
    assert without_secondary_indexes(with_fk) == (with_fk, [])  # the server would index the key's columns itself
    no_keys = create.split("  PRIMARY")[0].rstrip(",\n") + "\n) ENGINE=InnoDB"
    assert without_secondary_indexes(no_keys) == (no_keys, [])
