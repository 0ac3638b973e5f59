# SPDX-License-Identifier: Apache-2.0
"""The Ascend role workers and model runners, on vllm-ascend (written against
its main line at commit 182b75ea; imported only on an Ascend process)."""
