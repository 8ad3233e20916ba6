"""A fan-out whose replica sides are served over different transports: `--replica
[TRANSPORT://]HOST:PORT` parsed, and each member's transport looked up by its address."""

import pytest

from bridge.config import MysqlUrl, PrimaryConfig, parse_replica
from bridge.errors import ConfigError
from bridge.transport import TRANSPORTS


@pytest.mark.parametrize("text,parsed", [
    ("10.0.0.2:7400", (("10.0.0.2", 7400), "")),
    ("rdma://10.0.0.2:7400", (("10.0.0.2", 7400), "rdma")),
    ("tcp://:7401", (("127.0.0.1", 7401), "tcp")),
    ("shm://127.0.0.1:7402", (("127.0.0.1", 7402), "shm")),
    ("tcp://[::1]:7403", (("[::1]", 7403), "tcp")),
])
def test_a_replica_address_may_name_its_transport(text, parsed):
    assert parse_replica(text, TRANSPORTS) == parsed


@pytest.mark.parametrize("text,needle", [("ib://10.0.0.2:7400", "transport 'ib'"),
                                         ("rdma://10.0.0.2", "is not HOST:PORT"),
                                         ("rdma:/10.0.0.2:7400", "is not HOST:PORT")])
def test_a_bad_replica_address_names_what_is_wrong(text, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        parse_replica(text, TRANSPORTS)


def test_each_member_has_its_own_transport_else_the_primary_sides():
    a, b, c = ("h1", 1), ("h2", 2), ("h3", 3)
    cfg = PrimaryConfig(source=MysqlUrl.parse("mysql://u@127.0.0.1:3306"), replica=a, replicas=(a, b, c),
                        transports=("", "tcp", "shm"), transport="rdma")
    assert [cfg.transport_of(x) for x in (a, b, c)] == ["rdma", "tcp", "shm"]
    assert cfg.transports_used == ("rdma", "tcp", "shm")
    single = PrimaryConfig(source=MysqlUrl.parse("mysql://u@127.0.0.1:3306"), replica=a, transport="tcp")
    assert single.transport_of(a) == "tcp" and single.transports_used == ("tcp",)
