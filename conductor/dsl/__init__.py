"""The XML workflow language of Murano 0.2: loading, evaluation, scopes, queries,
the fixpoint's pending actions and its trace. No I/O: the cloud is reached by
the session loop through ``fornace.conductor.executors``."""
