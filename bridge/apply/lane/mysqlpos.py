"""A MySQL GTID set as the apply lane carries it (bridge.apply.lane and its compiled
twin): the set's text around the end of one uuid's last interval, which each
transaction of that uuid moves on by one, so that no set is parsed or printed per
transaction and each position row holds exactly what the general path would write
(``str`` of bridge.model.GtidSet). Pure: no I/O.
"""

from __future__ import annotations

from bridge.model import GtidSet

MYSQL_SET_MAX = 2048  # a MySQL GTID set's text the lane carries at most (the general path: any)


class MysqlPosition:
    """A MySQL GTID set as the lane carries it: the set it was given, and once a
    transaction names its uuid (``key``: uuid, or uuid:tag) the set's text around the
    last number of that key's last interval (``before``, ``hi``, ``after``), which each
    transaction of that key moves on by one. Anything else (another uuid, a gap) is
    the general path's, and the lane then starts again from the position it leaves."""

    def __init__(self, gtids: GtidSet) -> None:
        self.gtids, self.key, self.hi, self.start = gtids, None, 0, 0
        self.before = self.after = b""

    def follow(self, key: str) -> bool:
        """Carry ``key``'s last interval from now on; False when the set has none."""
        intervals = dict(self.gtids.mysql).get(key)
        if not intervals:
            return False
        lo, hi = intervals[-1]
        marked = tuple((k, ivs[:-1] + ((lo, _MARK),) if k == key else ivs) for k, ivs in self.gtids.mysql)
        before, mark, after = str(GtidSet(mysql=marked)).partition(str(_MARK))
        if not mark:
            return False
        self.key, self.hi, self.start = key, hi, hi
        self.before, self.after = before.encode(), after.encode()
        return True

    def next_of(self, gtid: str) -> bool:
        """Whether ``gtid`` is the next transaction of the carried key (the first one
        names the key)."""
        key, _, number = gtid.rpartition(":")
        if not number.isdigit() or not number.isascii() or len(number) > 19:
            return False
        if self.key is None and not self.follow(key):
            return False
        return key == self.key and int(number) == self.hi + 1

    def text(self, hi: int | None = None) -> bytes:
        """The set's text, the carried interval up to ``hi`` (default: where it is now)."""
        hi = self.hi if hi is None else hi
        if self.key is None or hi == self.start:
            return str(self.gtids).encode()
        return self.before + str(hi).encode() + self.after


_MARK = 10 ** 30  # a number no GTID set holds (gno < 2**63): where the carried interval ends


def mysql_position(gtids, keeps: bool) -> MysqlPosition | None:
    """The MySQL set ``gtids`` as the lane carries it, or None: not a MySQL set, the lane
    does not keep MySQL GTIDs (``keeps``), or its text over MYSQL_SET_MAX bytes."""
    if not keeps or not gtids.mysql or gtids.mariadb or len(str(gtids)) > MYSQL_SET_MAX:
        return None
    return MysqlPosition(gtids)
