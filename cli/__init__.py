"""The ``fornace`` command: the composition root, and the only package that
imports the services (API, conductor, agent). One module per sub-command; each
imports what it runs only when it runs."""
