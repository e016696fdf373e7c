"""agent queues: which queues a conductor used for an environment

Revision ID: 0004
Revises: 0003

The queues of an environment's agents (and its results queue) are named
from ids that a deletion task no longer carries; conductors write them down
as they use them, so the clean-up after a deletion (and ``fornace gc``) can
delete them.
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'agent_queues',
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('environment_id', sa.String(length=64), nullable=False),
        sa.Column('created', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('name'),
    )
    op.create_index('ix_agent_queues_environment_id', 'agent_queues', ['environment_id'])


def downgrade() -> None:
    op.drop_index('ix_agent_queues_environment_id', table_name='agent_queues')
    op.drop_table('agent_queues')
