"""What the replica side applies of the work it takes from the ring: the channel's
filter (bridge.filter: --include/--exclude/--rename-schema, recorded on the replica)
and, after a resumed clone or tables added by clone, the tables still catching up (their
changes up to the position their copy was made at are already on the replica)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import NamedTuple

from bridge.apply.channel import load_catch_up, settle_filter
from bridge.filter import Filter, filter_changes, touches_foreign
from bridge.model import Chunk, Gtid, GtidSet, Transaction
from bridge.server.sqlnames import channel_token
from bridge.wire.frame import Frame

log = logging.getLogger(__name__)


class Picked(NamedTuple):
    """A transaction (or chunk) taken from the ring: its frame, the decoded payload and
    when it was picked up (wall-clock ns, for the apply and deliver stages)."""
    frame: Frame
    item: Transaction | Chunk
    picked_ns: int


class Scope:
    """What this channel applies: ``rules`` (its filter) and ``catch_up`` (the tables a clone
    left catching up, with the position each copy is of)."""

    def __init__(self, rules: Filter, catch_up: dict[tuple[str, str], GtidSet]) -> None:
        self.rules = rules
        self.catch_up = catch_up  # (replica schema, table) -> the position its copy is of

    @classmethod
    def load(cls, applier, channel: str, target, given: str) -> Scope:
        """The channel's filter (``given``: --include/... as JSON, or ""), settled against
        the one recorded, and what a clone left catching up; another channel's checksum
        and repair tables are never this channel's (bridge.server.sqlnames.owned)."""
        rules = settle_filter(applier.conn, channel, target, Filter.from_json(given) if given else None,
                              applier.has_position)
        rules = replace(rules, channel_token=channel_token(channel))
        catch_up = load_catch_up(applier.conn, channel, applier.position.gtid_set, target)
        if catch_up:
            log.info("channel %r: %d tables were copied by a resumed clone at later positions than the channel's "
                     "start; their changes before those are left out until the stream passes them (%s)",
                     channel, len(catch_up), ", ".join(sorted({str(g) for g in catch_up.values()})))
        return cls(rules, catch_up)

    @property
    def everything(self) -> bool:
        """Every change of every table is applied as it came (``as_it_came`` then
        looks only for another channel's checksum and repair tables)."""
        return self.rules.everything and not self.catch_up

    def as_it_came(self, work: list[Picked]) -> bool:
        """Nothing to filter in this work: the per-transaction check of a channel that
        applies everything."""
        if not self.everything:
            return False
        for entry in work:
            if touches_foreign(entry.item.changes, self.rules):
                return False
        return True

    def describe(self) -> str:
        return self.rules.describe() + (f"; {len(self.catch_up)} tables catching up with a clone"
                                        if self.catch_up else "")

    def work(self, work: list[Picked], applier) -> list[Picked]:
        """The work's changes as the channel applies them (``applier``: the FORMAT_DESCRIPTION
        in force, and the position already held)."""
        out, fmt = [], None
        if self.catch_up:
            held = applier.position.gtid_set
            self.catch_up = {key: gtid for key, gtid in self.catch_up.items() if not held.contains_all(gtid)}
        for entry in work:
            item, rules = entry.item, self.rules
            if fmt is None or item.format_event:
                fmt = applier.format_for(item)
            if self.catch_up:
                gtid = Gtid.parse(item.gtid)
                later = frozenset(key for key, at in self.catch_up.items() if at.contains(gtid))
                rules = replace(rules, copied_later=later) if later else rules
            if rules.everything and not touches_foreign(item.changes, rules):
                out.append(entry)
                continue
            changes = filter_changes(item.changes, rules, fmt.checksum_bytes if fmt else 0,
                                     f"apply seq {entry.frame.seq} ({item.gtid})")
            out.append(entry._replace(item=replace(item, changes=changes)))
        return out
