"""job packages: the workflow package versions each job ran

Revision ID: 0016
Revises: 0015

A job keeps the versions of the workflow packages its environment was
pinned to when it started -- what its conductor ran -- as a JSON list of
``NAME VERSION`` (``["data folder"]`` when none), so that ``fornace jobs``
shows which versions a deployment ran.  Jobs from before stay null (not
known).
"""
from alembic import op
import sqlalchemy as sa


revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('deployments', sa.Column('packages', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('deployments') as batch:
        batch.drop_column('packages')
