-- Least privilege for the bridge's reader on the primary: read the binlog as a
-- replica and its position/settings. No table privileges at all.
-- {user} and {password} are filled in by the sandbox (or by you).
CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}';
GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'127.0.0.1';
