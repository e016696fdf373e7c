"""A database error never quotes the values of its statement: a description
holds passwords and the fields a type declares secret, and the API and the
conductor log such errors (an unexpected one with its traceback)."""
from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from fornace.common.db.engine import make_engine
from services import postgres_url

SECRET = "s1gn3d-by-me-only"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_error_does_not_quote_the_statements_values(backend, tmp_path):
    url = f"sqlite:///{tmp_path / 'e.sqlite'}" if backend == "sqlite" else postgres_url()
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            connection.execute(text("CREATE TEMPORARY TABLE held (id TEXT NOT NULL, body TEXT)"))
            with pytest.raises(DBAPIError) as caught:
                connection.execute(text("INSERT INTO held (id, body) VALUES (:id, :body)"),
                                   {"id": None, "body": f'{{"signature": "{SECRET}"}}'})
    finally:
        engine.dispose()
    assert "held" in str(caught.value)                  # what failed is still said
    for error in (caught.value, caught.value.orig):     # the traceback shows both
        assert SECRET not in str(error) and SECRET not in repr(error)
