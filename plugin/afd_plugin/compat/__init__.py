# SPDX-License-Identifier: Apache-2.0
"""Per-platform compatibility layers (feature checks, patches applied after
the platform resolved)."""
