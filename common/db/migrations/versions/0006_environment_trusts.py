"""environment trusts: the Keystone trust an environment's jobs act with

Revision ID: 0006
Revises: 0005

In keystone mode the API makes, at deploy time, a trust from the deploying
user to the Fornace service user on the environment's project; its jobs'
tasks carry it (contract 1.6) and the conductor acts with trust-scoped
tokens, so a deployment, heal or scale outlives the user's token.  The
trust is deleted with the environment.
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('environments', sa.Column('trust_id', sa.String(64), nullable=True))
    op.add_column('environments', sa.Column('trustor_id', sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('environments') as batch:
        batch.drop_column('trustor_id')
        batch.drop_column('trust_id')
