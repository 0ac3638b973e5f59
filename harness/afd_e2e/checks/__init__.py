# SPDX-License-Identifier: Apache-2.0
"""Checks a scenario runs against a live deployment, one module per check.

Token parity (parity.py), GSM8K accuracy and answer agreement (the gsm8k/
package, answer_agreement.py) and micro-batch evidence (evidence.py).
"""
