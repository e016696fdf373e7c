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
    {"password": 12345, "token": True, "apiKey": 1.5, "z": [{"secret": False}]},
    {"credentials": {"user": "u", "password": "p-123456"}, "after": "x"},   # an object
    {"passwords": ["a"], "adminPassword": ["p-1", "p-2"]},                  # a list
    {"to\u212aen": "kelvin-sign-token", "\u00e9password": "accented-1"},  # lower() to ASCII
    {"note": '\\", "password": "not a key', "password": 'with \\" and \\\\ inside'},
    {"a": {"b": {"my-Pass_word": "deep-secret", "c": [None, {"token": None}]}}},
])
def test_masked_json_is_the_text_of_the_masked_value(value):
    import json
    from fornace.common.secrets import masked_json

    expected = json.dumps(masked(value), sort_keys=True, default=str, separators=(",", ":"))
    assert masked_json(value) == expected


def test_masked_json_equals_the_masked_text_on_random_values():
    """The text substitution and the walk agree on many shapes of values."""
    import json
    import random

    from fornace.common.secrets import masked_json

    names = ["password", "name", "apiKey", "x", 'q"uote', "back\\slash", "token", "T\u212aEN",
             "db_passwd", "list", "é", 'x"password', "a\\\\token"]
    rng = random.Random(5)

    def make(depth: int):
        kind = rng.randrange(7 if depth < 4 else 4)
        if kind == 0:
            return rng.choice([None, True, False, 0, -3, 2.5, 1e300])
        if kind in (1, 2, 3):
            return rng.choice(["", "p-123456", 'a"b', "c\\d", '":', "password\":", "ü"])
        if kind in (4, 5):
            return {rng.choice(names): make(depth + 1) for _ in range(rng.randrange(4))}
        return [make(depth + 1) for _ in range(rng.randrange(4))]

    for _ in range(2000):
        value = make(0)
        expected = json.dumps(masked(value), sort_keys=True, default=str, separators=(",", ":"))
        assert masked_json(value) == expected, value
