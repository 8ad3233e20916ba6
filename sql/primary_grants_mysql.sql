-- The primary grants of sql/primary_grants.sql in MySQL 8's terms (MySQL has no
-- BINLOG MONITOR or REPLICATION MASTER ADMIN: REPLICATION CLIENT reads binlog
-- positions and SHOW REPLICAS). Used by the MySQL 8.4 compose variant.
CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{user}'@'127.0.0.1';
GRANT CREATE, INSERT, UPDATE, DELETE ON rdma_bridge.* TO '{user}'@'127.0.0.1';
