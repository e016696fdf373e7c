"""Workflow packages, as every side reads them.

:mod:`~fornace.common.packages.archive` is the archive format (unpacked
safely, packed for upload, the manifest read); :mod:`~fornace.common.packages.loader`
unpacks stored versions once per digest, checked against their sha256;
:mod:`~fornace.common.packages.layers` is the rule by which package files
are laid over the data folder's; :mod:`~fornace.common.packages.checks` names
the checks the conductor hands the API.  The API (``fornace.api.packages``)
and the conductor (``fornace.conductor.packages``) both build on these.
"""
