"""mask the secret fields of types in the jobs stored before

Revision ID: 0012
Revises: 0011

A job keeps its description and parameters masked.  Before 0012 only the
fields named like passwords were: a field a type declares secret
(``writeOnly``) under another name -- a workflow package's ``token``, say --
was stored in clear.  They are masked now in the jobs already stored, with
the secret fields of the built-in types and of the packages each job's
environment is pinned to (what the API masks new jobs with, but the API's
own ``catalog_file``, which a migration does not know).  There is no way
back: the downgrade leaves them masked.
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa

from fornace.common.catalog import CatalogError, builtin_catalog, catalog_with, declared_secrets
from fornace.common.secrets import masked

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None

_JOBS = sa.table("deployments", sa.column("id", sa.String), sa.column("environment_id", sa.String),
                 sa.column("description", sa.JSON), sa.column("parameters", sa.JSON))
_PINS = sa.table("environment_packages", sa.column("environment_id", sa.String),
                 sa.column("package_id", sa.String))
_PACKAGES = sa.table("packages", sa.column("id", sa.String), sa.column("types", sa.JSON))
_BATCH = 500


def _secret_keys(bind: sa.engine.Connection) -> dict[str, frozenset[str]]:
    """Each pinned environment's secret fields (the built-in types' and its packages')."""
    catalogs: dict[str, object] = {}
    for env_id, types in bind.execute(
            sa.select(_PINS.c.environment_id, _PACKAGES.c.types)
            .join(_PACKAGES, _PACKAGES.c.id == _PINS.c.package_id)
            .where(_PACKAGES.c.types.is_not(None))
            .order_by(_PINS.c.environment_id)):
        try:
            catalogs[env_id] = catalog_with(catalogs.get(env_id, builtin_catalog()), types)
        except CatalogError:
            continue   # types a newer rule refuses: the API refuses the environment too
    return {env_id: declared_secrets(catalog) for env_id, catalog in catalogs.items()}


def upgrade() -> None:
    bind = op.get_bind()
    builtin = declared_secrets(builtin_catalog())
    pinned = _secret_keys(bind)
    last = ""
    while True:
        rows = bind.execute(sa.select(_JOBS).where(_JOBS.c.id > last)
                            .order_by(_JOBS.c.id).limit(_BATCH)).all()
        if not rows:
            return
        for row in rows:
            keys = pinned.get(row.environment_id, builtin)
            description, parameters = masked(row.description, keys=keys), \
                masked(row.parameters, keys=keys)
            if (description, parameters) != (row.description, row.parameters):
                bind.execute(sa.update(_JOBS).where(_JOBS.c.id == row.id)
                             .values(description=description, parameters=parameters))
        last = rows[-1].id


def downgrade() -> None:
    pass   # the values masked are gone
