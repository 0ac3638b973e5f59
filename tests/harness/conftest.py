# SPDX-License-Identifier: Apache-2.0
"""Harness tests import helpers that live beside them (fake servers, repos)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
