"""What a broker URL names, without loading kombu (the engine and the CLI's
workflow tools read it; only the daemons need a transport)."""
from __future__ import annotations

#: The scheme of the folder broker (:mod:`fornace.common.folderbroker`).
FOLDER_SCHEME = "filesystem"


def is_folder_url(url: str) -> bool:
    """True for ``filesystem:///folder`` URLs."""
    return url.split(":", 1)[0] == FOLDER_SCHEME
