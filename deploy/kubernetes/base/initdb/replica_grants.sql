-- The bridge's applier on the replica replays rows and DDL of any schema, so it
-- needs data and DDL privileges on *.*, but no SUPER, GRANT OPTION or FILE (its
-- replication privileges serve --apply-mode relay, below).
-- BINLOG REPLAY lets it hand the primary's row events to the server (BINLOG
-- statements, --apply-mode binlog): the server applies them like a native replica,
-- on any table, without table privileges, so treat this account like a replication
-- account. SET USER lets it replay triggers, routines, views and events with the
-- primary's DEFINER, as a native replica keeps it. READ_ONLY ADMIN lets it write on a
-- replica that runs read_only=ON (as replicas should), which applications still cannot.
-- REPLICATION SLAVE ADMIN and SLAVE MONITOR (--apply-mode relay only): the replica side
-- points the server's channel at itself (CHANGE MASTER, START/STOP SLAVE) and reads its
-- status (SHOW SLAVE STATUS); it writes nothing else in that mode.
CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES,
      CREATE VIEW, SHOW VIEW, TRIGGER, CREATE ROUTINE, ALTER ROUTINE, EXECUTE,
      CREATE TEMPORARY TABLES, LOCK TABLES, EVENT, BINLOG REPLAY, SET USER, READ_ONLY ADMIN,
      REPLICATION SLAVE ADMIN, SLAVE MONITOR
      ON *.* TO '{user}'@'127.0.0.1';
