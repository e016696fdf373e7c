"""The XML workflow language of Murano 0.2: parsing, evaluation, scopes, queries,
limits on data, the fixpoint's pending actions, its trace, the checker, and
explanations of why a rule matches or not (``clauses``, ``why``).

The rule of this layer (checked by ``tests/common/test_import_rules.py``):
no I/O -- no files, sockets, processes, logging or clocks -- and no import
from the rest of the conductor; only from itself, the pure parts of
``fornace.common`` and pure libraries (lxml, jsonpath-ng).  Whatever else it
needs is handed in: workflow text as bytes (``workflows.compile_workflow``,
``checker.check_source``), the templates a workflow names and the deployment
the evaluator works for as the protocols of :mod:`.context` (the conductor's
``session.Session`` is one).  Reading workflow files is
``fornace.conductor.workflowfiles``'s; reaching the cloud is the session's,
through ``fornace.conductor.executors``.
"""
