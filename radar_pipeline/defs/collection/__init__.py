"""Collection: pg_stat_statements snapshots, plans, their compaction and retention."""
