-- The replica grants of sql/replica_grants.sql in MySQL 8's terms. REPLICATION_APPLIER
-- lets the applier run BINLOG statements (--apply-mode binlog) with the data
-- privileges below checked for each row event; SET_USER_ID (SET_ANY_DEFINER from
-- 8.2) lets it replay triggers, routines, views and events with the primary's
-- DEFINER. Used by the MySQL 8.4 compose variant.
CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES,
      CREATE VIEW, SHOW VIEW, TRIGGER, CREATE ROUTINE, ALTER ROUTINE, EXECUTE,
      CREATE TEMPORARY TABLES, LOCK TABLES, EVENT ON *.* TO '{user}'@'127.0.0.1';
GRANT REPLICATION_APPLIER, SET_ANY_DEFINER ON *.* TO '{user}'@'127.0.0.1';
