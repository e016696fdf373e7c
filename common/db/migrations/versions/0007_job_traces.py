"""job traces: which rule fired on which object during a job

Revision ID: 0007
Revises: 0006

Conductors send each job's trace before its result (contract 1.7); the API
keeps it compressed, one row per job, deleted with the job (and so with its
environment).  Jobs of earlier versions have none.
"""
from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'job_traces',
        sa.Column('deployment_id', sa.String(64),
                  sa.ForeignKey('deployments.id', ondelete='CASCADE'), primary_key=True),
        sa.Column('environment_id', sa.String(64), nullable=False),
        sa.Column('size', sa.Integer(), nullable=False),
        sa.Column('stored', sa.Integer(), nullable=False),
        sa.Column('truncated', sa.Boolean(), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.Column('created', sa.DateTime(), nullable=False),
    )
    op.create_index('ix_job_traces_environment_id', 'job_traces', ['environment_id'])


def downgrade() -> None:
    op.drop_index('ix_job_traces_environment_id', table_name='job_traces')
    op.drop_table('job_traces')
