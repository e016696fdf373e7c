"""Workflow packages in the API: stored, pinned, moved, served, shown.

:mod:`~fornace.api.packages.store` keeps the uploaded versions;
:mod:`~fornace.api.packages.usage` reads which versions an environment is
pinned to (and who uses a version) inside a caller's transaction;
:mod:`~fornace.api.packages.pins` pins environments and moves them, with
:mod:`~fornace.api.packages.plan` saying what a move changes;
:mod:`~fornace.api.packages.routes` are the HTTP routes;
:mod:`~fornace.api.packages.workflows` lists the workflow files in effect
for an environment (the dashboard's pages).  Nothing is imported here, so
that the stores may import :mod:`~fornace.api.packages.usage` without a cycle.
"""
