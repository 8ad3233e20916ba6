-- The account `rdma-bridge clone` reads the primary with (--source): it reads every
-- table and the definitions of views, triggers, events and routines of the cloned
-- schemas; RELOAD only for --parallel above 1 (a moment's FLUSH TABLES WITH READ LOCK,
-- so that every copy connection sees one moment). Not the reader's account: that one
-- reads the binlog and no table. Narrow SELECT, SHOW VIEW, TRIGGER, EVENT to the cloned
-- schemas if you like (plus SELECT ON mysql.proc for the routines' definitions).
-- {user} and {password} are filled in by you.
CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}';
GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, RELOAD ON *.* TO '{user}'@'127.0.0.1';
