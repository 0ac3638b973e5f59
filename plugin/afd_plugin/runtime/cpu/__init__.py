# SPDX-License-Identifier: Apache-2.0
"""CPU role workers and model runners (vLLM's CPUWorker / CPUModelRunner).

Only the CPU-specific glue lives here; the role logic is in ``runtime/``.
"""
