"""Storage of the API: SQLAlchemy models, engine set-up and Alembic migrations."""
