"""Fornace conductor: the XML workflow DSL engine and its deployment loop.

Its modules stand on five floors; a module imports from its own floor and
those below, never from above (``tests/common/test_import_rules.py`` checks
every import, lazy ones too), and ``fornace.common`` from any floor.
Bottom to top:

``dsl/``
    The workflow language, pure: parsing workflow text, the evaluator and
    its functions, queries, limits on data, pending actions, the trace, the
    checker.  No I/O and nothing of the floors above: what it needs from a
    deployment it reaches through the protocols of ``dsl/context.py``.
``executors/``
    The cloud side: one interface (``base``), one module per backend
    (``heat``, ``localcloud``, ``simulator``, ``agents``), what they share
    (``cfn``: merging templates and removing resources; ``cfnfunctions``
    and ``processes`` for the local cloud) and the name table
    (``__init__``).
the round
    One deployment: a catalog's templates and workflow files read
    (``templates``, ``workflowfiles``), a round's actions turned into stack
    updates and agent plans (``plans``, ``dispatch``), the workflow loop
    over the model (``session``, the DSL's evaluation context; ``gcpolicy``
    while it runs) and ``workflowcheck``, the DSL's checker over files.
``jobs/``
    The lifecycle of a job around its session: actions, hooks, task
    records, change detection, node status, the per-environment lock, its
    fence before each step that changes the cloud and the takeover of a
    silent holder's job.
the service
    The process (``daemon``: consuming tasks), its configuration
    (``config``) and the workflow packages a job is pinned to; any module
    not named above stands here.
"""
