"""Binlog apply mode (both servers of one flavor): the primary's row events handed to the
replica's own server in ``BINLOG`` statements. ``build`` makes the statements and the
events the replica side writes itself (the position row, the capability probe; pure),
``rows`` runs them on one replica connection, ``mismatch`` says why the server refused a
row event when it does not (pure)."""
