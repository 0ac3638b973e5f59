# SPDX-License-Identifier: Apache-2.0
"""``afd-e2e plan``'s pure core: the A:F ratio and micro-batches of an AFD
deployment from a model shape, a hardware profile, a workload and stage times.

Three published models, one module each, so each can be checked on its own:
``step3`` (Step-3, arXiv 2507.19427), ``megascale`` (MegaScale-Infer, arXiv
2504.02263) and ``provisioning`` (arXiv 2601.21351). ``search`` enumerates
deployments with them and recommends one; ``report`` writes text and JSON.
Nothing here imports torch or vLLM.
"""
