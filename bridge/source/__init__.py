"""Primary side: binlog reader adapter (the only importer of pymysqlreplication),
the pure transaction assembler, and preflight checks of the primary."""
