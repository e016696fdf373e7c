"""``python -m fornace.cli``: the ``fornace`` command."""
from fornace.cli.main import console

console()
