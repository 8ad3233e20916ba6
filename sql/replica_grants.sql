-- The bridge's applier on the replica replays rows and DDL of any schema, so it
-- needs data and DDL privileges on *.*, but no SUPER, GRANT OPTION, FILE or
-- replication privileges.
CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES,
      CREATE VIEW, SHOW VIEW, TRIGGER, CREATE ROUTINE, ALTER ROUTINE, EXECUTE,
      CREATE TEMPORARY TABLES, LOCK TABLES, EVENT ON *.* TO '{user}'@'127.0.0.1';
