"""The catalog shipped with Fornace (package data only): workflows, templates,
agent and init scripts, examples and ``types.json``. Not Python code."""
