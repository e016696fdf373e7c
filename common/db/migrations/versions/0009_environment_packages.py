"""environment packages: the workflow package versions an environment is pinned to

Revision ID: 0009
Revises: 0008

An environment names at most one version of each package; every task of its
jobs carries those versions (contract 1.8) and the conductor loads them from
the packages table.  A package an environment names cannot be deleted.
The service types of a package's types.json are kept beside its archive:
the API's catalog of an environment pinned to it has them.
"""
from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('packages', sa.Column('types', sa.JSON(), nullable=True))
    op.create_table(
        'environment_packages',
        sa.Column('environment_id', sa.String(64),
                  sa.ForeignKey('environments.id', ondelete='CASCADE'), primary_key=True),
        sa.Column('name', sa.String(64), primary_key=True),
        sa.Column('package_id', sa.String(64), sa.ForeignKey('packages.id'), nullable=False),
        sa.Column('pinned_by', sa.String(64), nullable=False),
        sa.Column('updated', sa.DateTime(), nullable=False),
    )
    op.create_index('ix_environment_packages_package_id', 'environment_packages',
                    ['package_id'])


def downgrade() -> None:
    op.drop_index('ix_environment_packages_package_id', table_name='environment_packages')
    op.drop_table('environment_packages')
    with op.batch_alter_table('packages') as batch:
        batch.drop_column('types')
