"""Job traces: kept as the conductor sent them, expanded only when read.

A trace event (contract 1.7) carries a job's trace compressed; the API
stores those bytes as they are (one row per job, a later copy of the same
job's trace replacing the first; looked at, not parsed: :func:`peek`) and
expands them for ``GET
.../jobs/{job_id}/trace``, the CLI and the dashboard.  Expanding is bounded
(:data:`fornace.common.contract.MAX_TRACE_BYTES`), so a forged event cannot
make the API inflate gigabytes, and what comes out is masked again with the
job's secrets: the conductor masked it, this makes sure.
"""
from __future__ import annotations

import json
import zlib
from typing import Any

from sqlalchemy.orm import Session as DbSession

from fornace.api.jobsecrets import JobLike
from fornace.common import contract
from fornace.common.db.inserts import insert_or_replace
from fornace.common.db.models import JobTrace, utcnow
from fornace.common.secrets import masked


class BadTrace(ValueError):
    """Stored or sent bytes that are not a trace document."""


def store_trace(db: DbSession, job: JobLike, trace: dict[str, Any]) -> dict[str, Any]:
    """Keep the (checked) ``trace`` of a trace event for ``job`` (replacing an
    earlier copy, in one statement where the database can); the row's values.
    Raises ContractError when its data is not base64 or not a trace once expanded."""
    data = contract.trace_data(trace)
    try:
        truncated = peek(data)
    except BadTrace as exc:
        raise contract.ContractError(f"job event message: field 'trace.data' {exc}",
                                     "job event", "trace.data") from None
    values = {"deployment_id": job.id, "environment_id": job.environment_id,
              "size": trace["size"], "stored": len(data), "data": data,
              "truncated": truncated, "created": utcnow()}
    statement = insert_or_replace(db.get_bind().dialect.name, JobTrace.__table__,
                                  ["deployment_id"], list(values))
    if statement is not None:
        db.execute(statement, values)
        return values
    row = db.get(JobTrace, job.id)
    if row is None:
        db.add(JobTrace(**values))
    else:
        for name, value in values.items():
            setattr(row, name, value)
    return values


def peek(data: bytes) -> bool:
    """Whether the trace of compressed ``data`` was truncated; BadTrace when it
    is not zlib data, expands past the bound, or is no trace object.  Storing
    looks no further than that: parsing a thousand units' trace (megabytes
    of JSON) held up the result behind it; :func:`expand` reads it whole
    when it is asked for, and a trace that is not JSON inside is then a 404
    saying so."""
    raw = _inflate(data).strip()
    if not (raw.startswith(b"{") and raw.endswith(b"}")):
        raise BadTrace("is not JSON once expanded")
    if b'"rounds":' not in raw:
        raise BadTrace("is not a trace (an object with rounds)")
    # the conductor writes the flag after the rounds; inside a string a quote is escaped
    flag = raw.rfind(b'"truncated":')
    return flag >= 0 and raw[flag + 12:].lstrip().startswith(b"true")


def expand(data: bytes) -> dict[str, Any]:
    """The trace document of compressed ``data`` (BadTrace when it is not one)."""
    raw = _inflate(data)
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadTrace("is not JSON once expanded") from None
    if not isinstance(document, dict) or not isinstance(document.get("rounds"), list):
        raise BadTrace("is not a trace (an object with rounds)")
    return document


def _inflate(data: bytes) -> bytes:
    """``data`` expanded, never past :data:`~fornace.common.contract.MAX_TRACE_BYTES`."""
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(data, contract.MAX_TRACE_BYTES + 1)
    except zlib.error:
        raise BadTrace("is not zlib data") from None
    if len(raw) > contract.MAX_TRACE_BYTES or inflater.unconsumed_tail:
        raise BadTrace(f"expands past {contract.MAX_TRACE_BYTES} bytes")
    return raw


def trace_view(row: JobTrace, secrets: set[str],
               secret_keys: frozenset[str] = frozenset()) -> dict[str, Any]:
    """What ``GET .../trace`` answers: the document and how big it is; the
    ``secrets`` it quotes and the values of fields named like passwords or
    ``secret_keys`` (its environment's declared ones) masked."""
    document = expand(row.data)
    document["rounds"] = masked(document["rounds"], secrets, keys=secret_keys)
    document["size"] = {"json": row.size, "compressed": row.stored}
    return document
