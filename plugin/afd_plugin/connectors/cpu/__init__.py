"""CPU connectors (gloo). Implementations are imported lazily by the factory."""
