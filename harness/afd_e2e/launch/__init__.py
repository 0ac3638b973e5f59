# SPDX-License-Identifier: Apache-2.0
"""From a scenario to the servers to start: the launch plan (plan.py: each
server's argv, environment and CPU share), logical-node placement
(placement.py) and port picking (ports.py).
"""
