"""What every side of Fornace shares: the message contract, the broker, errors,
secrets masking, the model-reading helpers, the type catalog, topology and the
database (``common/db``).

The rule of this package: it imports nothing of ``fornace.api``,
``fornace.conductor``, ``fornace.agent`` or ``fornace.cli``
(``tests/common/test_import_rules.py`` holds it to that).
"""
