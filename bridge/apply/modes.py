"""Apply modes (pure): which one a session uses, and what the replica user needs for it.

- ``binlog``: the primary's row events are applied by the replica's own server
  (``BINLOG``): native row-based semantics by construction. Needs both servers of
  one flavor (MariaDB or MySQL) and the privilege to run BINLOG.
- ``sql``: decoded rows replayed as INSERT/UPDATE/DELETE; for a primary of the other
  flavor (and, later, filters and renames).
- ``relay``: the replica server's own replication threads apply the primary's events,
  served to them by the replica side (bridge.relay); one flavor on both sides.
- ``auto`` (the default): ``binlog`` when the flavors match, else ``sql``.

Both replay DDL with the primary's DEFINER clauses, which needs the privilege to name
another user as definer (MariaDB ``SET USER``, MySQL ``SET_USER_ID`` /
``SET_ANY_DEFINER``), and on MySQL 8.2+ one that does not exist on the replica (a
native replica's applier may: ``ALLOW_NONEXISTENT_DEFINER``).
"""

from __future__ import annotations

from bridge.errors import ConfigError
from bridge.server.flavor import Flavor
from bridge.server.grants import holds

MODES = ("auto", "binlog", "sql", "relay")


def choose(requested: str, primary_flavor: str, replica_flavor: str) -> str:
    """The mode of a session; refuses ``binlog`` across flavors."""
    if requested not in MODES:
        raise ConfigError(f"apply mode: {requested!r} is not one of {', '.join(MODES)}")
    same = primary_flavor == replica_flavor
    if requested == "binlog" and not same:
        raise ConfigError(f"apply mode binlog: the primary is {primary_flavor} and the replica {replica_flavor}; "
                          "their row events only apply between servers of one flavor: use --apply-mode auto or sql")
    if requested == "relay" and not same:
        raise ConfigError(f"apply mode relay: the primary is {primary_flavor} and the replica {replica_flavor}; a "
                          "replica server's own replication reads only its own flavor's binlog: use --apply-mode "
                          "binlog or sql (sql replays rows across flavors)")
    if requested in ("sql", "relay"):
        return requested
    return "binlog" if same else "sql"


def missing(privileges: frozenset[str], mode: str, flavor: Flavor) -> list[str]:
    """Privileges the mode needs on a replica of ``flavor`` that the account's global
    ``privileges`` (bridge.server.grants.global_privileges) lack: the first alternative
    of each, as a GRANT names it."""
    needed = flavor.relay_privileges if mode == "relay" else \
        (flavor.binlog_apply_privileges if mode == "binlog" else (), flavor.definer_privileges,
         flavor.orphan_definer_privileges)
    return [alternatives[0] for alternatives in needed if alternatives and not holds(privileges, alternatives)]


def grant_statement(privileges: list[str], user: str, host: str) -> str:
    return f"GRANT {', '.join(privileges)} ON *.* TO '{user}'@'{host}'"


def why(privilege: str) -> str:
    if privilege in ("REPLICATION SLAVE ADMIN", "REPLICATION_SLAVE_ADMIN"):
        return "to point the replica server's channel at the relay (--apply-mode relay)"
    if privilege in ("SLAVE MONITOR", "REPLICATION CLIENT"):
        return "to read the channel's status (--apply-mode relay)"
    if privilege in ("BINLOG REPLAY", "REPLICATION_APPLIER"):
        return "to apply row events in the server (--apply-mode binlog)"
    if privilege == "ALLOW_NONEXISTENT_DEFINER":
        return "to replay objects whose DEFINER exists only on the primary, as a native replica does"
    return "to replay triggers, routines, views and events with the primary's DEFINER"
