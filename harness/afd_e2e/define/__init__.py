# SPDX-License-Identifier: Apache-2.0
"""What a scenario says and whether it may run: the scenario schema and
its strict YAML loading (scenario.py, yamlpos.py), the catalogue of scenario
files (catalogue.py), the deployment each role would be (deployment.py), the
gate rules (rules.py) and the fixed policies (policy.py).
"""
