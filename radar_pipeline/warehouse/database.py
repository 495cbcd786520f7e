"""Connections to the warehouse."""

from __future__ import annotations

import psycopg
import sqlalchemy as sa

from radar_pipeline.config import warehouse_url


def make_engine(url: str) -> sa.Engine:
    """A SQLAlchemy engine on the warehouse through psycopg 3 (the URL is validated first)."""
    return sa.create_engine(warehouse_url(url), pool_pre_ping=True, future=True)


def driver(conn: sa.Connection) -> psycopg.Connection:
    """The psycopg connection under a SQLAlchemy one (for COPY and plain-tuple reads), in the same transaction."""
    dbapi = conn.connection.driver_connection
    assert isinstance(dbapi, psycopg.Connection), "the warehouse engine must use the psycopg driver"
    return dbapi
