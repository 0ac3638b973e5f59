# SPDX-License-Identifier: Apache-2.0
"""Model shapes: read from a Hugging Face ``config.json`` (DeepSeek, Qwen-MoE,
Step-3 and Mixtral field names), a built-in name, or a scenario id.

Every missing or malformed field is reported at once, naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from afd_e2e.plan.builtin_models import BUILTIN_MODELS
from afd_e2e.plan.types import ModelShape, PlanInputError

EXPERT_FIELDS = (
    "n_routed_experts",
    "num_experts",
    "moe_num_experts",
    "num_local_experts",
)
TOP_K_FIELDS = ("num_experts_per_tok", "moe_top_k")


class _Reader:
    """Typed access to a config mapping that records every problem."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self.data = data
        self.where = where
        self.problems: list[str] = []

    def int(self, *names: str, what: str, default: int | None = None) -> int:
        for name in names:
            value = self.data.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                self.problems.append(
                    f"{self.where}: field {name!r} ({what}) must be a "
                    f"non-negative integer, got {value!r}"
                )
                return 0
            return value
        if default is not None:
            return default
        listed = " or ".join(repr(n) for n in names)
        self.problems.append(f"{self.where}: missing field {listed} ({what})")
        return 0

    def present(self, name: str) -> bool:
        return self.data.get(name) is not None


def shape_from_config(
    config: dict[str, Any], where: str, name: str | None = None
) -> ModelShape:
    """The shape of the model a Hugging Face config describes; ``where`` names
    the file in errors. Multimodal configs are read from their text_config."""
    if "hidden_size" not in config and isinstance(config.get("text_config"), dict):
        config = config["text_config"]
        where = f"{where} (text_config)"
    r = _Reader(config, where)
    hidden = r.int("hidden_size", what="the hidden size")
    layers = r.int("num_hidden_layers", what="the number of layers")
    heads = r.int("num_attention_heads", what="query heads per layer")
    experts = r.int(*EXPERT_FIELDS, what="routed experts per MoE layer", default=0)
    top_k = moe_width = 0
    shared = 0.0
    if experts:
        top_k = r.int(*TOP_K_FIELDS, what="experts each token activates")
        moe_width = r.int(
            "moe_intermediate_size", "intermediate_size", what="one expert's width"
        )
        shared = _shared_experts(r, moe_width)
        moe_layers = _moe_layer_count(r, layers)
    else:
        moe_layers = 0
    dense_width = 0
    if moe_layers < layers or r.present("intermediate_size"):
        dense_width = r.int("intermediate_size", what="the dense FFN width")
    attention, kv_values, width, attn_params = _attention(r, hidden, heads)
    vocab = config.get("vocab_size")
    if r.problems:
        raise PlanInputError(r.problems)
    if experts and not 0 < top_k <= experts:
        raise PlanInputError(
            f"{where}: the experts each token activates ({top_k}) must be "
            f"between 1 and the routed experts ({experts})"
        )
    return ModelShape(
        name=name or str(config.get("model_type") or Path(where).parent.name),
        source=where,
        hidden_size=hidden,
        num_layers=layers,
        moe_layers=moe_layers,
        routed_experts=experts,
        top_k=top_k,
        shared_experts=shared,
        moe_intermediate_size=moe_width,
        intermediate_size=dense_width,
        attention=attention,
        num_attention_heads=heads,
        kv_values_per_token=kv_values,
        attention_width=width,
        attention_params=attn_params,
        vocab_size=vocab if isinstance(vocab, int) and vocab > 0 else None,
    )


def _shared_experts(r: _Reader, moe_width: int) -> float:
    """Shared FFN width in units of one routed expert."""
    if r.present("n_shared_experts"):
        return float(r.int("n_shared_experts", what="shared experts"))
    for field in ("share_expert_dim", "shared_expert_intermediate_size"):
        if r.present(field):
            width = r.int(field, what="the shared expert's width")
            return width / moe_width if moe_width else 0.0
    return 0.0


def _moe_layer_count(r: _Reader, layers: int) -> int:
    """Layers with a MoE FFN: DeepSeek's first_k_dense_replace, Qwen's
    mlp_only_layers and decoder_sparse_step, Step-3's moe_layers_enum."""
    if r.present("first_k_dense_replace"):
        dense = r.int("first_k_dense_replace", what="leading dense layers")
        return max(layers - dense, 0)
    enum = r.data.get("moe_layers_enum")
    if enum is not None:
        try:
            items = enum.split(",") if isinstance(enum, str) else list(enum)
            moe = {int(item) for item in items if str(item).strip()}
        except (TypeError, ValueError):
            r.problems.append(
                f"{r.where}: field 'moe_layers_enum' must list layer numbers "
                f'("4,5,6"), got {enum!r}'
            )
            return 0
        return len({i for i in moe if 0 <= i < layers})
    only = r.data.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        r.problems.append(
            f"{r.where}: field 'mlp_only_layers' must be a list of layer "
            f"numbers, got {only!r}"
        )
        return 0
    step = r.int("decoder_sparse_step", what="MoE every n-th layer", default=1) or 1
    return sum(1 for i in range(layers) if i not in only and (i + 1) % step == 0)


def _attention(r: _Reader, hidden: int, heads: int) -> tuple[str, int, int, int]:
    """(kind, cached values per token, width each head reads, projection
    parameters) of one layer's attention."""
    if r.present("kv_lora_rank"):
        rank = r.int("kv_lora_rank", what="MLA's latent width")
        rope = r.int("qk_rope_head_dim", what="MLA's rotary width")
        nope = r.int("qk_nope_head_dim", what="MLA's non-rotary query width")
        v_dim = r.int("v_head_dim", what="MLA's value width")
        q_rank = r.int("q_lora_rank", what="MLA's query rank", default=0)
        qk = nope + rope
        q_params = (
            hidden * q_rank + q_rank * heads * qk if q_rank else hidden * heads * qk
        )
        params = (
            q_params
            + hidden * (rank + rope)
            + rank * heads * (nope + v_dim)
            + heads * v_dim * hidden
        )
        return "mla", rank + rope, rank + rope, params
    kv_heads = r.int(
        "num_key_value_heads",
        "num_attention_groups",
        what="key/value heads",
        default=heads,
    )
    head_dim = r.int("head_dim", what="the head width", default=hidden // max(heads, 1))
    q_rank = r.int("share_q_dim", "q_lora_rank", what="the query rank", default=0)
    q_out = heads * head_dim
    q_params = hidden * q_rank + q_rank * q_out if q_rank else hidden * q_out
    params = q_params + 2 * hidden * kv_heads * head_dim + q_out * hidden
    return "gqa", 2 * kv_heads * head_dim, head_dim, params


def read_config_file(path: Path) -> ModelShape:
    """The shape in a ``config.json`` (or a directory holding one)."""
    if path.is_dir():
        path = path / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanInputError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise PlanInputError(
            f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}"
        ) from None
    if not isinstance(data, dict):
        raise PlanInputError(f"{path}: a config.json must be a JSON object")
    return shape_from_config(data, str(path))


def builtin_shape(name: str) -> ModelShape:
    source, config = BUILTIN_MODELS[name]
    return shape_from_config(config, source, name=name)


def resolve_shape(
    spec: str, root: Path | None = None, model_root: Path | None = None
) -> ModelShape:
    """``spec`` is a built-in name, a config.json (or its directory), or the id
    of a scenario whose config is at hand (a tiny model's, or a hub model's
    under ``model_root``)."""
    if spec.lower() in BUILTIN_MODELS:
        return builtin_shape(spec.lower())
    path = Path(spec)
    if path.exists():
        return read_config_file(path)
    from afd_e2e.plan.scenario_shapes import scenario_shape

    shape = scenario_shape(spec, root, model_root)
    if shape is None:
        raise PlanInputError(
            f"--model: {spec!r} is not a built-in model, a config.json path or "
            f"a scenario id; built-in models: {', '.join(BUILTIN_MODELS)}"
        )
    return shape
