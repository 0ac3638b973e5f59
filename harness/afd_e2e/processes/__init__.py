# SPDX-License-Identifier: Apache-2.0
"""Starting, watching and stopping the servers of a run: the process manager
and its specs (process_manager.py, role_process.py), their logs and errors
(role_logs.py, role_errors.py), readiness (readiness.py), the strict
teardown and its record (teardown.py, teardown_record.py, proc_scan.py),
signals (interrupts.py), the terminal lines (terminal.py), and the vLLM
server sets tests and benchmarks start (servers.py).
"""
