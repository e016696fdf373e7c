"""Fornace API: the REST API (Murano 0.2 and its extensions), its store and the web dashboard."""
