"""What the tool knows of a MySQL or MariaDB server, whichever side it is on: its flavor
(the one place that decides what differs), its catalog (collations, variables), the
error numbers the bridge decides on, an account's grants, the bridge's own schema and
table names, the SQL files in ``sql/``, and the PyMySQL connection every part opens.
Nothing here knows the ring, the transports or the nodes."""
