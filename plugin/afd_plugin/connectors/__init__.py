"""Connectors: the registry (pure) and one package per backend."""
