"""One text per JSON value: keys sorted, no spaces, other objects as ``str``.

Digests (change detection, plan ids) are taken of this text, thousands of
times per job.  ``json.dumps(value, sort_keys=True, ...)`` builds a new
encoder for every call, which costs more than encoding a small value; here
the standard library's C encoder is built once.  Where that encoder is not
available (another Python implementation), or does not give the same text
as ``json.dumps`` on a sample, the standard encoder is used.
"""
from __future__ import annotations

import json
import json.encoder
from typing import Any, Callable

_SEPARATORS = (",", ":")


def _standard(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=_SEPARATORS)


def _c_encoder() -> Callable[[Any], str] | None:
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        # markers=None: no cycle check (JSON data has none; a cycle still ends
        # in RecursionError), as json.dumps(check_circular=False) does
        encode = make(None, str, json.encoder.encode_basestring_ascii, None,
                      _SEPARATORS[1], _SEPARATORS[0], True, False, True)
    except TypeError:   # the private signature changed
        return None

    def dumps(value: Any) -> str:
        return "".join(encode(value, 0))

    sample = {"b": [1, 2.5, None, True, "é\n"], "a": {"z": complex(1, 2), "y": -0.0},
              "c": float("inf")}
    try:
        if dumps(sample) != _standard(sample):
            return None
    except Exception:   # noqa: BLE001 -- any failure means: do not use it
        return None
    return dumps


_ENCODE = _c_encoder() or _standard


def canonical_json(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))``."""
    return _ENCODE(value)
