# SPDX-License-Identifier: Apache-2.0
"""CUDA role workers, model runners (V1 and V2) and the FFN graph backend.

Only the CUDA-specific glue lives here; the role logic is in ``runtime/``.
"""
