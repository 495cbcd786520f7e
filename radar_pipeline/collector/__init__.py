"""Talks to watched PostgreSQL servers: pg_stat_statements scrapes, statement texts and fingerprints."""
