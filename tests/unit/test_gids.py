"""Which port and GID a queue pair takes (bridge.transport.gids), on GID tables as real
devices list them: a ConnectX port with its link-local GIDs first and a VLAN's address
later, Soft-RoCE's two-entry table, an InfiniBand port."""

import pytest

from bridge.errors import ConfigError, TransportError
from bridge.transport.gids import ETHERNET, INFINIBAND, GidEntry, check_reach, choose, gid_of, has_address


def v(port, index, gid, v2=True, layer=ETHERNET):
    return GidEntry(port, index, gid, v2, layer)


# as `show_gids` lists a ConnectX-6 port with an untagged address and a VLAN's
CONNECTX = [
    v(1, 0, "fe80:0000:0000:0000:0e42:a1ff:fe9b:1c2e", v2=False),
    v(1, 1, "fe80:0000:0000:0000:0e42:a1ff:fe9b:1c2e"),
    v(1, 2, "0000:0000:0000:0000:0000:ffff:0a00:0005", v2=False),
    v(1, 3, "0000:0000:0000:0000:0000:ffff:0a00:0005"),
    v(1, 4, "0000:0000:0000:0000:0000:ffff:c612:0005", v2=False),  # 198.18.0.5 on vlan 100
    v(1, 5, "0000:0000:0000:0000:0000:ffff:c612:0005"),
    v(1, 6, "2001:0db8:0000:0000:0000:0000:0000:0005"),
]
SOFT_ROCE = [v(1, 0, "fe80:0000:0000:0000:5054:00ff:fe12:3456"), v(1, 1, "0000:0000:0000:0000:0000:ffff:0a0b:0001")]


def test_the_gid_of_the_control_connection_s_address_is_chosen_as_roce_v2():
    route = choose(CONNECTX, "mlx5_0", "198.18.0.5")
    assert (route.port, route.index, route.by_address) == (1, 5, True)
    assert "198.18.0.5" in route.reason and str(route.entry) == "198.18.0.5"
    assert choose(CONNECTX, "mlx5_0", "10.0.0.5").index == 3
    assert choose(CONNECTX, "mlx5_0", "2001:db8::5").index == 6
    assert choose(CONNECTX, "mlx5_0", "::ffff:10.0.0.5").index == 3  # a dual-stack socket's name for it


def test_soft_roce_s_link_local_first_entry_is_not_chosen():
    """Seen in the Soft-RoCE guest: GID index 0 (fe80::) was chosen, not the IPv4-mapped
    GID of the address the pair connected through."""
    assert choose(SOFT_ROCE, "rxe0", "10.11.0.1").index == 1
    loopback = choose(SOFT_ROCE, "rxe0", "127.0.0.1")
    assert (loopback.index, loopback.by_address) == (1, False) and "127.0.0.1 is no GID's" in loopback.reason


def test_without_the_address_in_the_table_the_best_routable_roce_v2_gid_is_taken_and_said():
    route = choose(CONNECTX, "mlx5_0", "10.9.9.9")
    assert (route.index, route.by_address) == (3, False)
    assert route.reason == "no GID of mlx5_0 is 10.9.9.9: the best of its table"
    only_link_local = [e for e in CONNECTX if e.index < 2]
    assert choose(only_link_local, "mlx5_0", "").index == 1  # v2 before v1


def test_an_index_or_port_named_is_taken_and_one_that_is_missing_is_refused_naming_what_there_is():
    assert choose(CONNECTX, "mlx5_0", "198.18.0.5", gid_index=3).index == 3
    two_ports = CONNECTX + [v(2, 3, "0000:0000:0000:0000:0000:ffff:0a01:0005")]
    assert choose(two_ports, "mlx5_0", "10.1.0.5").port == 2
    assert choose(two_ports, "mlx5_0", "", port=2).port == 2
    with pytest.raises(ConfigError, match="mlx5_0 port 1 has no GID at index 9 .*3 10.0.0.5, 4 198.18.0.5"):
        choose(CONNECTX, "mlx5_0", "", gid_index=9)
    with pytest.raises(ConfigError, match="mlx5_0 port 2 is not active or has no GID .*ports with GIDs: 1"):
        choose(CONNECTX, "mlx5_0", "", port=2)


def test_an_infiniband_port_uses_gid_0_and_routes_by_lid():
    ib = [v(1, 0, "fe80:0000:0000:0000:0002:c903:0011:2233", False, INFINIBAND),
          v(1, 1, "fec0:0000:0000:0000:0002:c903:0011:2233", False, INFINIBAND)]
    route = choose(ib, "mlx5_1", "192.168.7.5")  # an IPoIB address is no GID
    assert (route.index, route.by_address) == (0, False)
    check_reach(route.entry, "fe80::2:c903:11:4455", INFINIBAND)
    with pytest.raises(TransportError, match="port 1 is InfiniBand, the peer's Ethernet: both ends must be RoCE"):
        check_reach(route.entry, "::ffff:10.0.0.6", ETHERNET)


def test_a_link_local_gid_facing_a_routed_peer_is_refused_with_the_reason():
    link_local = CONNECTX[1]
    with pytest.raises(TransportError, match=r"GID fe80::e42:a1ff:fe9b:1c2e is link-local and cannot reach "
                                             r"198.19.0.7, which is on another subnet .*--gid-index"):
        check_reach(link_local, "0000:0000:0000:0000:0000:ffff:c613:0007")
    with pytest.raises(TransportError, match="GID fe80::1 is link-local and cannot reach 198.18.0.5"):
        check_reach(CONNECTX[5], "fe80::1")
    check_reach(link_local, "fe80::5054:ff:fe12:3456")  # both on one link
    check_reach(CONNECTX[5], "::ffff:198.19.0.7")  # routed
    with pytest.raises(TransportError, match="of different IP versions"):
        check_reach(CONNECTX[5], "2001:db8::7")
    with pytest.raises(TransportError, match="the peer's GID 'nonsense'"):
        check_reach(CONNECTX[5], "nonsense")


def test_addresses_no_gid_can_have():
    assert gid_of("127.0.0.1") is None and gid_of("::1") is None and gid_of("0.0.0.0") is None
    assert gid_of("localhost") is None
    assert str(gid_of("10.0.0.5")) == "::ffff:a00:5" and str(gid_of("fe80::1%eth0")) == "fe80::1"
    assert has_address(CONNECTX, "198.18.0.5") and not has_address(CONNECTX, "127.0.0.1")


def test_error_completions_are_named_as_libibverbs_names_them_and_told_apart():
    from bridge.errors import RdmaError

    lost = str(RdmaError.completion(12, 1))
    assert "transport retry counter exceeded (status 12, opcode 1)" in lost and "link or the peer" in lost
    fenced = str(RdmaError.completion(10, 1))
    assert "remote access error" in fenced and "a new session fenced this writer" in fenced
    assert "local length error" in str(RdmaError.completion(1, 0)) and "a bug" in str(RdmaError.completion(1, 0))
    assert "Work Request Flushed Error" in str(RdmaError.completion(5, 129))
    assert "unknown (status 99" in str(RdmaError.completion(99, 0))
