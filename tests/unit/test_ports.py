"""The loopback ports handed to servers and bridge processes."""

import socket

from bridge.lab.ports import _ephemeral_low, free_port


def test_free_ports_are_bindable_distinct_and_outside_the_ephemeral_range():
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    low = _ephemeral_low()
    for port in ports:
        assert 10000 <= port < max(low, 11000)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))
