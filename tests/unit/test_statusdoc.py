"""The status document's definition catches a document that leaves it."""

from bridge.ops.statusdoc import PrimaryStatus, ReplicaStatus, deviations


def test_a_document_that_leaves_its_definition_is_caught():
    doc = {"role": "replica", "target": "mysql://u:***@h:1", "channel": "c", "listen": "127.0.0.1:1",
           "transport": "shm", "workers": 1, "apply_mode": "binlog", "replicates": "every table", "session": True,
           "gtid_set": "0-1-5",
           "apply_stopped": None, "delay_s": 0.0, "scheduling": "normal", "counters": {"transactions_applied": 5},
           "stages": {}}
    assert deviations(doc, ReplicaStatus) == set()
    doc["stages"]["apply"] = {"count": 1, "p50": 2.0, "p99": 3.0, "p999": 3.0, "max": 3.0}
    assert deviations(doc, ReplicaStatus) == set()
    doc["stages"]["apply"]["p75"] = 2.5
    doc["counters"]["made_up"] = 1
    del doc["gtid_set"]
    doc["extra"] = 2
    assert deviations(doc, ReplicaStatus) == {"+counters.made_up", "-gtid_set", "+extra", "+stages.apply.p75"}
    assert "-connected" in deviations({"role": "primary"}, PrimaryStatus)
