"""Fornace agent package (grows in later issues)."""
