# SPDX-License-Identifier: Apache-2.0
"""What a run and the repository publish: run results (report.py:
results.json, JUnit XML, summary.md), the CI gate lists (gates.py) and the
generated documentation tables (doc_tables.py).
"""
