"""The asset service: studios submit bakes over HTTP and workers run them on the one run path.

:mod:`~neuralbake.service.store` is the durable job store (jobs with attempts and leases, their
gap-free numbered events, API token hashes; SQLite or PostgreSQL through SQLAlchemy, schema by the
alembic migrations in ``migrations/``); :mod:`~neuralbake.service.settings` says how one instance
runs; :mod:`~neuralbake.service.uploads` keeps content-addressed uploads;
:mod:`~neuralbake.service.worker` claims jobs and runs each as a bake with
:func:`neuralbake.bakes.run.run_bake`, storing the runner's events so every subscriber sees the
progress the CLI shows; :mod:`~neuralbake.service.app` is the HTTP API (``create_app``). Only the
store and the settings are imported here, so that workers and the CLI need not load the web stack.
"""

from neuralbake.service.settings import ServiceSettings
from neuralbake.service.store import TERMINAL_STATES, EventRecord, JobRecord, JobStateError, Store, TokenRecord

__all__ = ["TERMINAL_STATES", "EventRecord", "JobRecord", "JobStateError", "ServiceSettings", "Store", "TokenRecord"]
