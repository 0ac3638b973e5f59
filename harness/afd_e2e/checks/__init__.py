# SPDX-License-Identifier: Apache-2.0
"""Checks a scenario runs against a live deployment, one module per check.

Token parity (parity.py), GSM8K accuracy and answer agreement (the gsm8k/
package, answer_agreement.py), micro-batch evidence (evidence.py), cancel and
recover (cancel_recover.py) and FFN failover (ffn_failover.py, its streams in
failover_streams.py).
"""
