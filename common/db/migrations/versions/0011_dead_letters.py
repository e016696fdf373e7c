"""dead letters: messages from the conductor that could not be stored

Revision ID: 0011
Revises: 0010

A report, result or job event that the contract refuses, or that the
database refuses even alone, is set aside in this table with the reason
(acknowledged, so it neither loops nor holds back the messages behind it);
operators list them (GET /dead-letters, ``fornace dead-letters list``).
"""
from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'dead_letters',
        sa.Column('id', sa.String(64), primary_key=True),
        sa.Column('queue', sa.String(255), nullable=False),
        sa.Column('kind', sa.String(32), nullable=False),
        sa.Column('message_id', sa.String(255), nullable=True),
        sa.Column('job_id', sa.String(64), nullable=True),
        sa.Column('environment_id', sa.String(64), nullable=True),
        sa.Column('tenant_id', sa.String(64), nullable=True),
        sa.Column('reason', sa.Text(), nullable=False),
        sa.Column('body', sa.Text(), nullable=False),
        sa.Column('created', sa.DateTime(), nullable=False),
    )
    op.create_index('ix_dead_letters_tenant_id', 'dead_letters', ['tenant_id'])
    op.create_index('ix_dead_letters_created', 'dead_letters', ['created'])


def downgrade() -> None:
    op.drop_index('ix_dead_letters_created', table_name='dead_letters')
    op.drop_index('ix_dead_letters_tenant_id', table_name='dead_letters')
    op.drop_table('dead_letters')
