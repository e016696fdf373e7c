"""Workflow packages in the conductor.

:mod:`~fornace.conductor.packages.jobdata` gives a task the workflows,
templates and types of the package versions it names;
:mod:`~fornace.conductor.packages.check` is what ``fornace workflow check``
says of a package, handed to the API by the command that starts it.
"""
