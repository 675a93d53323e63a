"""The asset service: studios submit bakes over HTTP and workers run them on the one run path.

This package holds the durable job store (:mod:`neuralbake.service.store`: jobs, attempts and
leases, events, API tokens, in SQLite or PostgreSQL through SQLAlchemy, with alembic migrations).
A job is a bake config; a worker runs it with :func:`neuralbake.bakes.run.run_bake` and stores the
runner's events, so every subscriber sees the same progress the CLI shows.
"""

__all__ = ["store"]
