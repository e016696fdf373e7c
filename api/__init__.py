"""Fornace api package (grows in later issues)."""
