"""task events stored once: the ids of those stored

Revision ID: 0014
Revises: 0013

A task event appends its log lines to its task's row, so one stored twice (a
batch the conductor sends again when its confirm was lost, a message the
broker delivers again) would show its lines twice.  ``job_event_ids`` keeps
the key of each task event stored (its message id and the fence token it
carried, ``message-id@token``); rows go with their job.
"""
from alembic import op
import sqlalchemy as sa


revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'job_event_ids',
        sa.Column('key', sa.String(length=300), nullable=False),
        sa.Column('deployment_id', sa.String(length=64), nullable=False),
        sa.Column('created', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['deployment_id'], ['deployments.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('key'),
    )
    with op.batch_alter_table('job_event_ids', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_event_ids_deployment_id'), ['deployment_id'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('job_event_ids', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_event_ids_deployment_id'))
    op.drop_table('job_event_ids')
