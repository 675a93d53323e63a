"""Alembic migrations of the service's job store (run by :meth:`neuralbake.service.store.Store.migrate`)."""
