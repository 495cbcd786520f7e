"""Connections to the warehouse."""

from __future__ import annotations

import sqlalchemy as sa

from radar_pipeline.config import warehouse_url


def make_engine(url: str) -> sa.Engine:
    """A SQLAlchemy engine on the warehouse through psycopg 3 (the URL is validated first)."""
    return sa.create_engine(warehouse_url(url), pool_pre_ping=True, future=True)
