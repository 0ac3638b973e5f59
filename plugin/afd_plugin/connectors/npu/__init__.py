# SPDX-License-Identifier: Apache-2.0
"""Ascend NPU connectors (CAM ops). Imported lazily; native ops load at init."""
