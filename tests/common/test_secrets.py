"""Which fields hold secrets, and masking them."""
from __future__ import annotations

import pytest

from fornace.common.secrets import MASK, find_secrets, is_secret_key, masked


@pytest.mark.parametrize("name", [
    "adminPassword", "password", "recoveryPassword", "saPassword", "db_passwd",
    "passphrase", "secret", "clientSecret", "aws_secret_key", "token", "auth_token",
    "authToken", "apiKey", "api_key", "API-KEY", "privateKey", "private_key",
    "credentials"])
def test_secret_names(name):
    assert is_secret_key(name)


@pytest.mark.parametrize("name", [
    "name", "domain", "unitNamingPattern", "port", "tokenTtl", "passwordPolicy",
    "keyName", "publicKey", "id", 3, None])
def test_ordinary_names(name):
    assert not is_secret_key(name)


def test_regression_other_secret_names_were_shown():
    """Regression: only names ending in 'password' (and token/secret) were masked."""
    model = {"services": [{"apiKey": "k-123456", "db_passwd": "p-123456",
                           "privateKey": "-----BEGIN KEY-----", "name": "web"}]}
    assert find_secrets(model) == {"k-123456", "p-123456", "-----BEGIN KEY-----"}
    shown = masked(model)["services"][0]
    assert shown == {"apiKey": MASK, "db_passwd": MASK, "privateKey": MASK, "name": "web"}


@pytest.mark.parametrize("value", [
    {"b": 1, "a": [1, 2, {"z": None}]},
    {"service": {"adminPassword": "Secret-123", "name": "w"}, "unit": {}},
    {"list": [{"token": "abcdef"}, {"x": "y"}]},
    {'we"ird\\key': 1, "my\\password": "hidden-value"},   # escaped in the JSON text
    {"password": None, "note": 'text with "password": inside'},
    [1, "two", {"apiKey": "k-1234567"}],
    "plain",
])
def test_masked_json_is_the_text_of_the_masked_value(value):
    import json
    from fornace.common.secrets import masked_json

    expected = json.dumps(masked(value), sort_keys=True, default=str, separators=(",", ":"))
    assert masked_json(value) == expected
