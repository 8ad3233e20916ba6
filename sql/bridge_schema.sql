-- Replica-side bookkeeping. One row per channel, updated in the same replica
-- transaction as the rows it describes, so the position is exact after a crash.
-- pending_ddl_seq is set (and committed) before a DDL runs: a replay of that seq
-- tolerates "already exists / already gone" errors, which makes DDL idempotent.
CREATE DATABASE IF NOT EXISTS rdma_bridge;
CREATE TABLE IF NOT EXISTS rdma_bridge.bridge_meta (
  channel          VARCHAR(64) NOT NULL PRIMARY KEY,
  applied_seq      BIGINT UNSIGNED NOT NULL,
  gtid_set         TEXT NOT NULL,
  pending_ddl_seq  BIGINT UNSIGNED NOT NULL DEFAULT 0,
  updated_at       TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
-- One row is written here, and rolled back, when a connection first applies row
-- events with BINLOG: it shows whether the server goes on after a BINLOG statement.
CREATE TABLE IF NOT EXISTS rdma_bridge.bridge_probe (
  id INT NOT NULL
) ENGINE=InnoDB;
-- The heartbeat rows the primary side writes on the primary (bridge.source.heartbeat)
-- arrive here; the replica side upserts them, so this table exists before any does.
CREATE TABLE IF NOT EXISTS rdma_bridge.heartbeat (
  source VARCHAR(128) NOT NULL PRIMARY KEY,
  ts_us  BIGINT NOT NULL
) ENGINE=InnoDB;
-- Transactions an operator skipped (`rdma-bridge skip --gtid G`) after applying stopped
-- on them: which, by whom, the error they stopped on, when the skip was made
-- (skipped_at) and when the primary side read the transaction from the binlog (read_at).
CREATE TABLE IF NOT EXISTS rdma_bridge.skipped (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  channel     VARCHAR(64) NOT NULL,
  seq         BIGINT UNSIGNED NOT NULL,
  gtid        VARCHAR(128) NOT NULL,
  error       TEXT NOT NULL,
  skipped_by  VARCHAR(255) NOT NULL,
  skipped_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  read_at     TIMESTAMP(6) NULL
) ENGINE=InnoDB;
-- Where each channel's applying stopped, while it is stopped (an error, or
-- --until-gtid reached): `checksum` and `repair` see it at once instead of waiting.
CREATE TABLE IF NOT EXISTS rdma_bridge.apply_stopped (
  channel     VARCHAR(64) NOT NULL PRIMARY KEY,
  seq         BIGINT UNSIGNED NOT NULL,
  gtid        VARCHAR(128) NOT NULL,
  error       TEXT NOT NULL,
  until_gtid  TINYINT NOT NULL DEFAULT 0,
  stopped_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
-- `rdma-bridge clone`: one row per table copied for a channel, written before the
-- first table is created; a clone that stopped before finished=1 is found by the next.
CREATE TABLE IF NOT EXISTS rdma_bridge.clone_state (
  channel       VARCHAR(64) NOT NULL,
  db            VARCHAR(64) NOT NULL,
  tbl           VARCHAR(64) NOT NULL,
  gtid_set      TEXT NOT NULL,
  rows_copied   BIGINT UNSIGNED NOT NULL DEFAULT 0,
  bytes_copied  BIGINT UNSIGNED NOT NULL DEFAULT 0,
  copied        TINYINT NOT NULL DEFAULT 0,
  finished      TINYINT NOT NULL DEFAULT 0,
  updated_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (channel, db, tbl)
) ENGINE=InnoDB;
-- What each channel replicates (--include/--exclude/--rename-schema, as JSON): rules is
-- what the replica side applies (NULL or no row: every table under its own name);
-- pending is what a clone of the channel that has not finished will make it.
CREATE TABLE IF NOT EXISTS rdma_bridge.channel_filter (
  channel     VARCHAR(64) NOT NULL PRIMARY KEY,
  rules       TEXT NULL,
  pending     TEXT NULL,
  updated_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
