# SPDX-License-Identifier: Apache-2.0
"""afd-e2e: the end-to-end harness of afd-plugin.

Imports only the plugin's pure core; never torch or vLLM.
"""

__version__ = "0.1.0"
