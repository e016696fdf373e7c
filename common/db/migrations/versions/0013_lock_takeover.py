"""job locks keep their job's task, so a silent holder's job is taken over

Revision ID: 0013
Revises: 0012

While a conductor holds an environment's lock the row keeps the task it runs
(``task_id``, the broker's message id, and ``task_body``, its JSON): when the
holder's heartbeat stops for ``lock_stale_after`` (a frozen process whose task
message the broker still holds), another conductor claims the takeover
(``takeover_at``, at most once per stale period) and runs the task itself.
Freed and revoked rows keep none of it.  The body holds what a task holds
(the environment's model, its secrets included, and the user's token), as
the environments table does: it is never logged.
"""
from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job_locks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('task_id', sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column('task_body', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('takeover_at', sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job_locks', schema=None) as batch_op:
        batch_op.drop_column('takeover_at')
        batch_op.drop_column('task_body')
        batch_op.drop_column('task_id')
