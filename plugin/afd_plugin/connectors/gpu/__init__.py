# SPDX-License-Identifier: Apache-2.0
"""CUDA-only connectors (NCCL). Implementations are imported lazily by the factory."""
