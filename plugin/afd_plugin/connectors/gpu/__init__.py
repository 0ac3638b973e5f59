"""CUDA-only connectors (NCCL). Implementations are imported lazily by the factory."""
