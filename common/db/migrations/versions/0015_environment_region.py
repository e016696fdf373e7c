"""environment region: the OpenStack region an environment is deployed to

Revision ID: 0015
Revises: 0014

Later Murano clients (python-muranoclient 2.8: ``openstack environment
create --region``, ``murano environment-create``) send ``region`` with the
name.  It is kept with the environment (null when none was given) and put in
the object model its jobs are given, where the conductor takes it as the
region of the environment's stack.
"""
from alembic import op
import sqlalchemy as sa


revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('environments', sa.Column('region', sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('environments') as batch:
        batch.drop_column('region')
