"""packages: workflow packages operators upload

Revision ID: 0008
Revises: 0007

A package is a checked archive of workflows, templates, scripts and catalog
entries with a name and an immutable version, owned by a project or public
(cloud admin only).  The archive is kept as uploaded, with its sha256.
"""
from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'packages',
        sa.Column('id', sa.String(64), primary_key=True),
        sa.Column('name', sa.String(64), nullable=False),
        sa.Column('version', sa.String(32), nullable=False),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('tenant_id', sa.String(64), nullable=True),
        sa.Column('public', sa.Boolean(), nullable=False),
        sa.Column('content_type', sa.String(64), nullable=False),
        sa.Column('digest', sa.String(64), nullable=False),
        sa.Column('size', sa.BigInteger(), nullable=False),
        sa.Column('files', sa.JSON(), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.Column('uploaded_by', sa.String(64), nullable=False),
        sa.Column('created', sa.DateTime(), nullable=False),
        sa.UniqueConstraint('name', 'version', name='uq_packages_name_version'),
    )
    op.create_index('ix_packages_name', 'packages', ['name'])
    op.create_index('ix_packages_tenant_id', 'packages', ['tenant_id'])


def downgrade() -> None:
    op.drop_index('ix_packages_tenant_id', table_name='packages')
    op.drop_index('ix_packages_name', table_name='packages')
    op.drop_table('packages')
