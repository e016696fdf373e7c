"""Fornace unit agent: runs execution plans from the broker (see agent/README.md)."""
