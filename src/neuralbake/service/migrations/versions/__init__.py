"""Alembic revisions of the job store, oldest first."""
