# SPDX-License-Identifier: Apache-2.0
"""CPU connectors (gloo). Implementations are imported lazily by the factory."""
