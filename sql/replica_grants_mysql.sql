-- The replica grants of sql/replica_grants.sql in MySQL's terms (8.2 and later).
-- REPLICATION_APPLIER lets the applier run BINLOG statements (--apply-mode binlog)
-- with the data privileges below checked for each row event, and commit each
-- replicated transaction with its primary's GTID (GTID_NEXT); SET_ANY_DEFINER lets it
-- replay triggers, routines, views and events with the primary's DEFINER, and
-- ALLOW_NONEXISTENT_DEFINER with a definer that exists only on the primary, as a native
-- replica keeps them (MySQL 8.0 before 8.2: SET_USER_ID instead of both). SYSTEM_USER:
-- MySQL lets only it alter or drop an object whose definer does not exist on this
-- server (it might be a system account), which a native replica's applier does.
-- TRANSACTION_GTID_TAG (8.3 and later): a transaction the primary committed with a
-- tagged GTID (uuid:tag:n) commits with it here too. CONNECTION_ADMIN lets it write on a
-- replica that runs read_only=ON (as replicas should; super_read_only=ON stops every
-- account, the applier too, and start-replica refuses it). REPLICATION_SLAVE_ADMIN and
-- REPLICATION CLIENT (--apply-mode relay only): the replica side points the server's
-- channel at itself (CHANGE REPLICATION SOURCE, START/STOP REPLICA) and reads its status.
CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES,
      CREATE VIEW, SHOW VIEW, TRIGGER, CREATE ROUTINE, ALTER ROUTINE, EXECUTE,
      CREATE TEMPORARY TABLES, LOCK TABLES, EVENT, REPLICATION CLIENT ON *.* TO '{user}'@'127.0.0.1';
GRANT REPLICATION_APPLIER, SET_ANY_DEFINER, ALLOW_NONEXISTENT_DEFINER, SYSTEM_USER, TRANSACTION_GTID_TAG,
      CONNECTION_ADMIN, REPLICATION_SLAVE_ADMIN ON *.* TO '{user}'@'127.0.0.1';
