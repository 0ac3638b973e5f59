"""Ascend NPU connectors (CAM ops). Imported lazily; native ops load at init."""
