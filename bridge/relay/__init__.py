"""The source side of MySQL/MariaDB replication, served by the replica side to its own
replica server (``start-replica --apply-mode relay``): the handshake and authentication
a replica's IO thread goes through, the queries it asks, ``COM_REGISTER_SLAVE`` and the
binlog dump, with the primary's events as the primary wrote them and heartbeats when
idle. MaxScale's binlog router and Ripple stand in the same place.

``protocol`` (packets, pure), ``auth`` (the two password plugins, pure), ``answers`` (the
queries, pure), ``events`` (the events a source makes itself, pure), ``server`` (sockets
and sessions)."""
