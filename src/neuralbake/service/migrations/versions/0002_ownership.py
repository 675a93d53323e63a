"""Ownership: admin tokens, which token made each upload, and job configs that hold references.

Before this revision a job's config held the absolute server path of each input; since, it holds
the input's reference (``<upload id>/<name>``) and a worker resolves it when it runs. Stored jobs
are rewritten here: any string of a config that points into an upload folder becomes that
upload's reference. Uploads made before this revision have no recorded owner, so only admin
tokens can use them in new jobs (their earlier jobs keep running). A postfx job queued before it
that names its library entries by absolute path fails with a message saying so: submit it again.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28
"""

import json
import re

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# An absolute path into an upload folder, at the start of a value or after a NAME= / CONDITION= head.
_UPLOAD_PREFIX = re.compile(r"(^|=)/[^=]*/uploads/(?=[0-9a-f]{64}/)")


def _as_reference(value):  # noqa: ANN001, ANN202 - any JSON value
    """An absolute upload path inside a stored config -> its reference; everything else as it was."""
    stack = [value]
    while stack:
        item = stack.pop()
        pairs = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, inner in list(pairs):
            if isinstance(inner, str):
                item[key] = _UPLOAD_PREFIX.sub(r"\1", inner)
            elif isinstance(inner, dict | list):
                stack.append(inner)
    return value


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("admin", sa.Boolean, nullable=False, server_default=sa.false()))
    op.create_table(
        "upload_owners",
        sa.Column("upload_id", sa.String(64), primary_key=True),
        sa.Column("token_id", sa.String(32), sa.ForeignKey("tokens.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("created", sa.Float, nullable=False),
    )
    connection = op.get_bind()
    jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("config", sa.Text))
    for row in connection.execute(sa.select(jobs.c.id, jobs.c.config)).all():
        config = json.loads(row.config)
        rewritten = json.dumps(_as_reference(config))
        if rewritten != row.config:
            connection.execute(jobs.update().where(jobs.c.id == row.id).values(config=rewritten))


def downgrade() -> None:
    op.drop_table("upload_owners")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("admin")
