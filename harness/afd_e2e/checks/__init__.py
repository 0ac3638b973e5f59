"""Checks a scenario runs against a live deployment, one module per check.

Token parity, GSM8K accuracy (gsm8k*.py) and micro-batch evidence (evidence.py).
"""
