"""The sample configuration shipped with Fornace (package data only)."""
