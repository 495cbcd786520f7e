"""The warehouse: schema migrations from sql/, SQLAlchemy Core tables mirroring them, reads and writes."""
