"""Where the files shipped inside the package are: the catalog, the sample
configuration, the database migrations, the dashboard's templates.

Found with :mod:`importlib.resources`, so they are the same files in a
checkout (editable install) and in an installed wheel; never paths computed
from the source tree.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def package_folder(package: str) -> Path:
    """The folder of ``package`` as a real path (Fornace is installed unzipped)."""
    folder = files(package)
    if not isinstance(folder, Path):
        raise RuntimeError(f"{package} is not installed as plain files ({folder!r})")
    return folder


# the catalog shipped with Fornace: workflows, templates, scripts, types.json
BUILTIN_DATA = package_folder("fornace.data")
