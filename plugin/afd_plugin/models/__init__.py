"""Role-split model wrappers: each role builds and loads only its own modules.

Imports vLLM; loaded lazily by the runtime.
"""
