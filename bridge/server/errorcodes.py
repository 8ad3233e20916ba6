"""The server and client error numbers the bridge decides on, in one table (MariaDB and
MySQL share them): what counts as a lost connection (worth a reconnect and a retry,
everywhere), and the few errors a step expects and handles."""

# a connection that is gone: the client's (can't connect, server gone away, lost during
# a query) and the server's (shutting down, this connection killed)
CANT_CONNECT = 2003
SERVER_GONE = 2006
LOST_DURING_QUERY = 2013
SERVER_SHUTDOWN = 1053
CONNECTION_KILLED = 1927
CONNECTION_LOST = frozenset({CANT_CONNECT, SERVER_GONE, LOST_DURING_QUERY, SERVER_SHUTDOWN, CONNECTION_KILLED})

LOCK_CONFLICT = frozenset({1205, 1213})  # lock wait timeout, deadlock: the transaction may be retried
UNKNOWN_DATABASE = 1049
NO_SUCH_TABLE = 1146
ROW_NOT_FOUND = 1032  # a row event's row is not on the replica (HA_ERR_KEY_NOT_FOUND)
NO_SELECT = frozenset({1142, 1143, 1044})  # table / column / database access denied
NO_CHANNEL = frozenset({1617, 3074})  # MariaDB: no master connection of that name; MySQL: no such channel
WORKER_STOPPED_AFTER_ERROR = 3030  # MySQL: an applier worker stopped because an earlier one failed (commit order)


def code_of(exc: BaseException) -> int:
    """A PyMySQL error's number (0 when it has none)."""
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else 0


def answered(code: int) -> bool:
    """The error is the server's answer to a statement (1000-1999 and 3000 up; 2000-2999
    are the client's own), on a connection that goes on: not one of the lost ones."""
    return (1000 <= code < 2000 or code >= 3000) and code not in CONNECTION_LOST
