"""jobs: actions on deployments, job tasks and job locks

Revision ID: 0002
Revises: 0001

A deployment becomes a job of any lifecycle action: ``kind`` holds the
action name (up to 32 characters: ``execute_operation`` does not fit in 16)
and ``parameters`` what it was asked with.
"""
from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.alter_column('kind', existing_type=sa.String(length=16),
                              type_=sa.String(length=32), existing_nullable=False)
        batch_op.add_column(sa.Column('parameters', sa.JSON(), nullable=True))

    op.create_table('job_tasks',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('deployment_id', sa.String(length=64), nullable=False),
    sa.Column('environment_id', sa.String(length=64), nullable=False),
    sa.Column('change_id', sa.String(length=64), nullable=False),
    sa.Column('target', sa.String(length=255), nullable=True),
    sa.Column('target_name', sa.String(length=255), nullable=True),
    sa.Column('operation', sa.String(length=255), nullable=True),
    sa.Column('reason', sa.String(length=64), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('started', sa.DateTime(), nullable=True),
    sa.Column('finished', sa.DateTime(), nullable=True),
    sa.Column('summary', sa.Text(), nullable=True),
    sa.Column('digest', sa.String(length=128), nullable=True),
    sa.Column('log', sa.Text(), nullable=True),
    sa.Column('created', sa.DateTime(), nullable=False),
    sa.Column('updated', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['deployment_id'], ['deployments.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('environment_id', 'change_id', name='uq_job_tasks_environment_change')
    )
    with op.batch_alter_table('job_tasks', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_tasks_deployment_id'), ['deployment_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_job_tasks_environment_id'), ['environment_id'], unique=False)

    op.create_table('job_locks',
    sa.Column('environment_id', sa.String(length=64), nullable=False),
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('holder', sa.String(length=255), nullable=False),
    sa.Column('acquired', sa.DateTime(), nullable=False),
    sa.Column('heartbeat', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('environment_id')
    )


def downgrade() -> None:
    op.drop_table('job_locks')
    with op.batch_alter_table('job_tasks', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_tasks_environment_id'))
        batch_op.drop_index(batch_op.f('ix_job_tasks_deployment_id'))

    op.drop_table('job_tasks')
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.drop_column('parameters')
        batch_op.alter_column('kind', existing_type=sa.String(length=32),
                              type_=sa.String(length=16), existing_nullable=False)
