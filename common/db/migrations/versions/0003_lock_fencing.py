"""job locks with a fencing token: rows stay, freed, so the token only grows

Revision ID: 0003
Revises: 0002

``token`` grows with every grant of an environment's lock and with every
revocation (abandon); a freed lock keeps its row (``job_id`` and ``holder``
empty) so the next grant continues the count.  ``done_job`` is the last job
that ended holding the lock: a redelivered copy of it is not run again.
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job_locks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('token', sa.BigInteger(), nullable=False,
                                      server_default='0'))
        batch_op.add_column(sa.Column('done_job', sa.String(length=64), nullable=True))
        batch_op.alter_column('job_id', existing_type=sa.String(length=64), nullable=True)
        batch_op.alter_column('holder', existing_type=sa.String(length=255), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM job_locks WHERE job_id IS NULL")
    with op.batch_alter_table('job_locks', schema=None) as batch_op:
        batch_op.alter_column('holder', existing_type=sa.String(length=255), nullable=False)
        batch_op.alter_column('job_id', existing_type=sa.String(length=64), nullable=False)
        batch_op.drop_column('done_job')
        batch_op.drop_column('token')
