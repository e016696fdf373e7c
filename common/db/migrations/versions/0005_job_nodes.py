"""job nodes: the node states a running job has sent

Revision ID: 0005
Revises: 0004

While a job runs its conductor sends the node state and status of each unit
and service that moves (contract 1.5); the API keeps the latest of each on
the job, and shows them over the environment's last known statuses.
"""
from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('deployments', sa.Column('nodes', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('deployments') as batch:
        batch.drop_column('nodes')
