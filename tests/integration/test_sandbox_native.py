"""The sandbox's native replica (the benchmarks' baseline) added to a primary that
already holds data: it starts from a copy of the primary, not from its position alone."""

import time

from bridge.config import MysqlUrl
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import connect


def test_a_native_replica_added_later_holds_what_the_primary_held_and_keeps_following(tmp_path):
    box = Sandbox(tmp_path / "box")
    try:
        info = box.up()
        primary = connect(MysqlUrl.parse(info["primary_admin"]))
        with primary.cursor() as cur:
            cur.execute("CREATE DATABASE earlier")
            cur.execute("CREATE TABLE earlier.t (id INT PRIMARY KEY, v VARCHAR(10))")
            cur.execute("INSERT INTO earlier.t VALUES (1, 'before')")
        info = box.up(native_replica=True)
        with primary.cursor() as cur:
            cur.execute("INSERT INTO earlier.t VALUES (2, 'after')")
            cur.execute("UPDATE earlier.t SET v = 'changed' WHERE id = 1")
        native = box.native_connection()
        deadline = time.monotonic() + 30
        with native.cursor() as cur:
            while True:
                cur.execute("SELECT id, v FROM earlier.t ORDER BY id")
                rows = cur.fetchall()
                if rows == ((1, "changed"), (2, "after")) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            cur.execute("SHOW SLAVE STATUS")
            status = dict(zip([c[0] for c in cur.description], cur.fetchone()))
        assert rows == ((1, "changed"), (2, "after"))
        assert (status["Slave_SQL_Running"], status["Last_SQL_Error"]) == ("Yes", "")
        primary.close()
        native.close()
    finally:
        box.down()
