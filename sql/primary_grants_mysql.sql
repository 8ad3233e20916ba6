-- The primary grants of sql/primary_grants.sql in MySQL's terms (MySQL has no
-- BINLOG MONITOR or REPLICATION MASTER ADMIN: REPLICATION CLIENT reads binlog
-- positions, SHOW BINARY LOG STATUS and SHOW REPLICAS). The sandbox and the MySQL
-- compose variant use it.
CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{user}'@'127.0.0.1';
GRANT CREATE, INSERT, UPDATE, DELETE ON rdma_bridge.* TO '{user}'@'127.0.0.1';
