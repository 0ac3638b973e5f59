# SPDX-License-Identifier: Apache-2.0
"""Connectors: the registry (pure) and one package per backend."""
