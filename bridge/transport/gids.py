"""Which RDMA port and GID a queue pair uses, and whether the pair can reach its peer (pure).

A RoCE device lists several GIDs per port: on ConnectX index 0 is the ``fe80::`` link-local
GID made from the MAC (RoCE v1 at 0, v2 at 1), and each IP address of the netdev, or of a
VLAN netdev above it, adds an IPv4-mapped (``::ffff:a.b.c.d``) or IPv6 GID later in the
table, again once per RoCE version. The GID a queue pair sends from decides the source IP
of its packets, so the VLAN (and with it the lossless priority) and whether the fabric can
route them. The right one is the GID of the address the control connection runs over:
the path the operator already routes. RoCE v1 GIDs cannot cross a router; a link-local one
cannot either.

An InfiniBand port routes by LID inside its subnet: its GIDs are not IP addresses, and the
queue pair is addressed by the peer's LID (``dlid``), GID index 0.

This module takes the table as values (read by bridge.transport.rdma) and decides.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from bridge.errors import ConfigError, TransportError

ETHERNET, INFINIBAND = "Ethernet", "InfiniBand"


@dataclass(frozen=True, slots=True)
class GidEntry:
    """One GID of one port: what ``ibv_query_gid`` and ``ibv_query_gid_ex`` say of it."""
    port: int
    index: int
    gid: str  # as the verbs print it ("0000:0000:0000:0000:0000:ffff:0a0b:0001") or any IPv6 text
    roce_v2: bool
    link_layer: str = ETHERNET

    @property
    def address(self) -> ipaddress.IPv6Address:
        return ipaddress.IPv6Address(self.gid)

    @property
    def link_local(self) -> bool:
        return self.address.is_link_local

    def __str__(self) -> str:
        return _text(self.address)


@dataclass(frozen=True, slots=True)
class Route:
    """The port and GID chosen, and why (said in the log, ``status`` and ``doctor``)."""
    entry: GidEntry
    by_address: bool  # the GID of the control connection's local address, or named by --gid-index
    reason: str

    @property
    def port(self) -> int:
        return self.entry.port

    @property
    def index(self) -> int:
        return self.entry.index


def gid_of(address: str) -> ipaddress.IPv6Address | None:
    """The GID an IP address has in a RoCE table (IPv4: mapped), None for an address no GID
    can have (loopback, unspecified) or that is not an IP address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if ip.is_loopback or ip.is_unspecified:
        return None
    return ipaddress.IPv6Address(f"::ffff:{ip}") if isinstance(ip, ipaddress.IPv4Address) else ip


def has_address(entries: list[GidEntry], address: str) -> bool:
    wanted = gid_of(address)
    return wanted is not None and any(e.address == wanted for e in entries)


def pick_device(tables: dict[str, list[GidEntry]], named: str | None, local_address: str) -> str:
    """The device ``named`` (ConfigError where there is none of that name), else the first
    with a GID of ``local_address``, else the first listed (``tables``: each device's GIDs,
    in the order the verbs list them)."""
    if named is not None:
        if named not in tables:
            raise ConfigError(f"rdma transport: --rdma-device {named}: no such device (this host has "
                              f"{', '.join(tables) or 'none'})")
        return named
    for name, entries in tables.items():
        if has_address(entries, local_address):
            return name
    return next(iter(tables))


def choose(entries: list[GidEntry], device: str, local_address: str = "", port: int | None = None,
           gid_index: int | None = None) -> Route:
    """The GID a queue pair of ``device`` uses: ``gid_index`` (on ``port``, else on the first
    port listed) when given; else the RoCE v2 GID of ``local_address`` (the control
    connection's own end); else the best the table has (RoCE v2 before v1, an IPv4-mapped
    or global address before a link-local one; an InfiniBand port's GID 0). ``entries``
    holds the active ports' non-zero GIDs. ConfigError names what is missing."""
    listed = [e for e in entries if port is None or e.port == port]
    if not listed:
        ports = sorted({e.port for e in entries})
        raise ConfigError(f"rdma transport: {device} port {port} is not active or has no GID "
                          f"(active ports with GIDs: {', '.join(map(str, ports)) or 'none'})")
    if gid_index is not None:
        on = port if port is not None else listed[0].port
        for e in listed:
            if e.port == on and e.index == gid_index:
                return Route(e, True, f"--gid-index {gid_index}")
        raise ConfigError(f"rdma transport: {device} port {on} has no GID at index {gid_index} (it has: "
                          f"{', '.join(f'{e.index} {e}' for e in listed if e.port == on)})")
    wanted = gid_of(local_address)
    if wanted is not None:
        matches = sorted((e for e in listed if e.address == wanted), key=lambda e: (not e.roce_v2, e.port, e.index))
        if matches:
            return Route(matches[0], True, f"the GID of {local_address}, this side's end of the control connection")
    best = min(listed, key=_rank)
    why = f"no GID of {device} is {local_address}" if wanted is not None else \
        f"{local_address or 'no address'} is no GID's"
    return Route(best, False, f"{why}: the best of its table")


def _rank(e: GidEntry) -> tuple:
    if e.link_layer == INFINIBAND:
        return (0, e.index, e.port)  # GID 0 of an InfiniBand port: routing is by LID
    return (1, not e.roce_v2, e.link_local, e.address.ipv4_mapped is None, e.port, e.index)


def check_reach(ours: GidEntry, peer_gid: str, peer_link_layer: str = ETHERNET) -> None:
    """Refuse a pair that cannot reach each other: a link layer on one end the other lacks,
    or a link-local RoCE GID on one end with a routable one on the other (the peer is on
    another subnet, or speaks another IP version: link-local packets never pass a router)."""
    if peer_link_layer != ours.link_layer:
        raise TransportError(f"rdma transport: this side's port {ours.port} is {ours.link_layer}, the peer's "
                             f"{peer_link_layer}: both ends must be RoCE, or both InfiniBand")
    if ours.link_layer == INFINIBAND:
        return
    try:
        theirs = ipaddress.IPv6Address(peer_gid)
    except ValueError as exc:
        raise TransportError(f"rdma transport: the peer's GID {peer_gid!r}: {exc}") from exc
    if ours.link_local != theirs.is_link_local:
        local, other = (ours, _text(theirs)) if ours.link_local else (_text(theirs), ours)
        raise TransportError(
            f"rdma transport: GID {local} is link-local and cannot reach {other}, which is on another subnet "
            "(a router never forwards link-local packets): give the RoCE netdev at the link-local end an IP "
            "address on the path to the peer (its IPv4-mapped GID is then chosen), or name one with --gid-index")
    if (ours.address.ipv4_mapped is None) != (theirs.ipv4_mapped is None) and not ours.link_local:
        raise TransportError(f"rdma transport: GID {ours} and the peer's {_text(theirs)} are of different IP "
                             "versions: connect the two sides over addresses of one version, or name GIDs of one "
                             "version with --gid-index")


def _text(address: ipaddress.IPv6Address) -> str:
    """A GID as an operator knows it: the IPv4 address of an IPv4-mapped one."""
    mapped = address.ipv4_mapped
    return str(mapped) if mapped is not None else str(address)


def said(route: dict) -> str:
    """Where a queue pair runs (``RdmaRingHost.route``, ``RdmaRemoteRing.route``, status'
    ``rdma``), on one line: the log line at start, ``status``, ``doctor``."""
    return (f"{route['device']} port {route['port']}, GID index {route['gid_index']} ({route['gid']}, "
            f"{'RoCE v2' if route['roce_v2'] else route['link_layer']}), traffic class {route['traffic_class']}, "
            f"service level {route['service_level']}; {route['chosen_by']}")
