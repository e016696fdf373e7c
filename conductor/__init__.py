"""Fornace conductor: the XML workflow DSL engine and its deployment loop."""
