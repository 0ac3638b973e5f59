# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e bench``: vLLM's serving benchmark against a scenario's AFD
deployment and its colocated baseline, one after the other, with the ratio."""
