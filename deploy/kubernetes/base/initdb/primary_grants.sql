-- Least privilege for the bridge's reader on the primary: read the binlog as a
-- replica (REPLICATION SLAVE), read binlog positions (BINLOG MONITOR) and list
-- connected replicas to refuse a server_id clash (REPLICATION MASTER ADMIN is what
-- SHOW SLAVE HOSTS needs on MariaDB 10.5+). No table privileges at all.
-- {user} and {password} are filled in by the sandbox (or by you).
CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}';
GRANT REPLICATION SLAVE, BINLOG MONITOR, REPLICATION MASTER ADMIN ON *.* TO '{user}'@'127.0.0.1';
-- The heartbeat (pt-heartbeat style lag measurement, --heartbeat-interval) writes one
-- row per bridge into rdma_bridge.heartbeat on the primary (and, with --heartbeat-table
-- rdma_bridge.pt_heartbeat, a pt-heartbeat row); nothing else is written. A
-- --heartbeat-table in another schema needs the same grant on that schema.
GRANT CREATE, INSERT, UPDATE, DELETE ON rdma_bridge.* TO '{user}'@'127.0.0.1';
