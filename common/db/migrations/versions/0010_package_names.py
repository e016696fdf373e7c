"""package names: the project that owns each workflow package name

Revision ID: 0010
Revises: 0009

Only the project owning a name uploads versions of it (another project's
upload of that name is refused).  Existing names go to the project of their
oldest version; a name whose oldest version is public goes to the cloud
admin (``tenant_id`` NULL).
"""
from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'package_names',
        sa.Column('name', sa.String(64), primary_key=True),
        sa.Column('tenant_id', sa.String(64), nullable=True),
        sa.Column('created', sa.DateTime(), nullable=False),
        sa.Column('updated', sa.DateTime(), nullable=False),
    )
    op.create_index('ix_package_names_tenant_id', 'package_names', ['tenant_id'])
    # each name's oldest version (ties: the smaller id) gives its owner
    op.execute(
        "INSERT INTO package_names (name, tenant_id, created, updated) "
        "SELECT p.name, p.tenant_id, p.created, p.created FROM packages p "
        "WHERE NOT EXISTS (SELECT 1 FROM packages q WHERE q.name = p.name AND "
        "(q.created < p.created OR (q.created = p.created AND q.id < p.id)))")


def downgrade() -> None:
    op.drop_index('ix_package_names_tenant_id', table_name='package_names')
    op.drop_table('package_names')
