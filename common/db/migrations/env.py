"""Alembic environment: migrations run in code with the URL from our config."""
from alembic import context
from sqlalchemy import engine_from_config, pool

from fornace.common.db.models import Base
from fornace.common.db.urls import checked, connect_args

config = context.config


def run() -> None:
    if context.is_offline_mode():
        context.configure(url=config.get_main_option("sqlalchemy.url"),
                          target_metadata=Base.metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = checked(config.get_main_option("sqlalchemy.url"))
    connectable = engine_from_config(config.get_section(config.config_ini_section) or {},
                                     prefix="sqlalchemy.", poolclass=pool.NullPool,
                                     connect_args=connect_args(url))
    with connectable.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()


run()
