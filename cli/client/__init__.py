"""Commands that use a running Fornace over its REST API (standard library only)."""
