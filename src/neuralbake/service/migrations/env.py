"""Alembic environment of the job store.

:meth:`neuralbake.service.store.Store.migrate` hands over its open connection (one transaction,
which on PostgreSQL holds the migration lock). Run by the ``alembic`` command instead (with
``script_location`` set to this folder and ``sqlalchemy.url`` to the database in alembic.ini), it
connects itself, or with ``--sql`` writes the SQL for a database administrator to review.
"""

import sqlalchemy as sa
from alembic import context

config = context.config
connection = config.attributes.get("connection")
if connection is not None:
    context.configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()
else:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("migrations: sqlalchemy.url: no database given. Fix: call Store(url).migrate(), or set sqlalchemy.url in alembic.ini.")
    if context.is_offline_mode():
        context.configure(url=url, literal_binds=True, render_as_batch=url.startswith("sqlite"))
        with context.begin_transaction():
            context.run_migrations()
    else:
        engine = sa.create_engine(url)
        with engine.begin() as own:
            context.configure(connection=own, render_as_batch=own.dialect.name == "sqlite")
            with context.begin_transaction():
                context.run_migrations()
        engine.dispose()
