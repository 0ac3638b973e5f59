# SPDX-License-Identifier: Apache-2.0
"""Role workers, model runners and the FFN daemon; imports vLLM.

Imported lazily, only inside vLLM processes and only for the platform in use.
"""
