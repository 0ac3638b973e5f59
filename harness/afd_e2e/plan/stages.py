# SPDX-License-Identifier: Apache-2.0
"""Stage-time models: one layer's attention, dispatch, FFN and combine times
for a deployment (A, F, batch), from the roofline or from calibration fits.

Each also gives the linear models of arXiv 2601.21351 (``provisioning``) for
one FFN instance at a context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from afd_e2e.plan.calibration import StageFits
from afd_e2e.plan.profiles import HardwareProfile
from afd_e2e.plan.provisioning import LinearStageModels
from afd_e2e.plan.routing import experts_touched, instance_hit_fraction
from afd_e2e.plan.types import DTYPE_BYTES, ModelShape, PlanInputError, StageTimes

COMBINE_BYTES = 2
"""The combine returns 16-bit activations (Step-3 section 5.4)."""


class StageModel(Protocol):
    kind: str
    """``roofline`` or ``calibrated``."""

    def times(self, attention: int, ffn: int, batch: int, context: float) -> StageTimes:
        """Per layer, one micro-batch of ``batch`` sequences per attention
        instance, A attention and F FFN instances."""
        ...

    def linear(self, context: float) -> LinearStageModels:
        """arXiv 2601.21351's linear stage models for one FFN instance."""
        ...


def _traffic(
    shape: ModelShape, attention: int, ffn: int, batch: int
) -> tuple[float, float]:
    """Token copies one attention instance sends, and one FFN instance
    receives, per micro-batch and layer."""
    hit = instance_hit_fraction(ffn, shape.top_k)
    return batch * ffn * hit, attention * batch * hit


@dataclass(frozen=True)
class RooflineModel:
    """Peak FLOP/s and bandwidth, no overheads: an upper bound on speed.

    Attention reads its projection weights once and each sequence's KV cache;
    its core runs at the KV dtype's peak, projections at ``dtype``'s. The FFN
    reads the weights of the experts the micro-batch touches and computes the
    activated ones (averaged over dense and MoE layers). The network carries
    ``dtype``-wide dispatch and 16-bit combine over the instance's NICs.
    """

    shape: ModelShape
    profile: HardwareProfile
    dtype: str
    kv_dtype: str
    kind: str = "roofline"

    @classmethod
    def build(
        cls, shape: ModelShape, profile: HardwareProfile, dtype: str, kv_dtype: str
    ) -> RooflineModel:
        problems = []
        missing = [
            name
            for name in ("peak_flops", "memory_bandwidth", "network_bandwidth")
            if not getattr(profile, name)
        ]
        if missing:
            problems.append(
                f"profile {profile.name}: {', '.join(missing)} not given (left to "
                "calibration); pass --calibration FILE with measured stage times"
            )
        elif profile.flops(dtype) is None:
            known = ", ".join(profile.peak_flops)
            problems.append(
                f"profile {profile.name}: no peak_flops for dtype {dtype!r}; "
                f"pass --dtype {known.replace(', ', ' or --dtype ')}, or "
                "--calibration"
            )
        if problems:
            raise PlanInputError(problems)
        return cls(shape, profile, dtype, kv_dtype)

    @property
    def _devices(self) -> int:
        return self.profile.devices_per_instance

    @property
    def _bandwidth(self) -> float:
        assert self.profile.memory_bandwidth is not None
        return self.profile.memory_bandwidth * self._devices

    @property
    def _network(self) -> float:
        assert self.profile.network_bandwidth is not None
        return self.profile.network_bandwidth

    def _flops(self, dtype: str) -> float:
        value = self.profile.flops(dtype) or self.profile.flops(self.dtype)
        assert value is not None
        return value * self._devices

    def _attention_per_sequence(self, context: float) -> tuple[float, float]:
        """(memory, compute) seconds one sequence adds to a layer's attention."""
        s = self.shape
        memory = context * s.kv_values_per_token * DTYPE_BYTES[self.kv_dtype]
        core = 4 * s.num_attention_heads * s.attention_width * context
        compute = 2 * s.attention_params / self._flops(self.dtype) + core / self._flops(
            self.kv_dtype
        )
        return memory / self._bandwidth, compute

    def _attention_weights_s(self) -> float:
        return self.shape.attention_params * DTYPE_BYTES[self.dtype] / self._bandwidth

    def _ffn_weights_s(self, tokens: float, ffn: int) -> float:
        """Seconds to read one FFN instance's share of the touched weights,
        averaged over the layers."""
        s = self.shape
        touched = experts_touched(tokens, s.top_k, s.routed_experts)
        moe = (s.routed_experts * touched + s.shared_experts) * s.expert_params
        params = (s.moe_layers * moe + s.dense_layers * s.dense_ffn_params) / (
            s.num_layers
        )
        return params * DTYPE_BYTES[self.dtype] / ffn / self._bandwidth

    def _ffn_flop_s(self) -> float:
        """Seconds of FFN compute per token, averaged over the layers."""
        per_layer = 2 * self.shape.ffn_params_activated / self.shape.num_layers
        return per_layer / self._flops(self.dtype)

    def times(self, attention: int, ffn: int, batch: int, context: float) -> StageTimes:
        memory, compute = self._attention_per_sequence(context)
        t_a = max(self._attention_weights_s() + batch * memory, batch * compute)
        tokens = attention * batch
        t_f = max(self._ffn_weights_s(tokens, ffn), tokens / ffn * self._ffn_flop_s())
        sent, received = _traffic(self.shape, attention, ffn, batch)
        per_token = self.shape.hidden_size / self._network
        busiest = max(sent, received)
        return StageTimes(
            attention=t_a,
            dispatch=busiest * per_token * DTYPE_BYTES[self.dtype],
            ffn=t_f,
            combine=busiest * per_token * max(COMBINE_BYTES, DTYPE_BYTES[self.dtype]),
        )

    def linear(self, context: float) -> LinearStageModels:
        """Linearised: attention per KV token at this context; the FFN as
        weight read plus compute (a sum where the roofline takes a max, so
        up to 2x slow near the ridge); exchange per token, no latency."""
        memory, compute = self._attention_per_sequence(context)
        round_trip = (
            self.shape.hidden_size
            / self._network
            * (DTYPE_BYTES[self.dtype] + max(COMBINE_BYTES, DTYPE_BYTES[self.dtype]))
        )
        return LinearStageModels(
            alpha_a=max(memory, compute) / context,
            beta_a=self._attention_weights_s(),
            alpha_c=round_trip,
            beta_c=0.0,
            alpha_f=self._ffn_flop_s(),
            beta_f=self._ffn_weights_s(float("inf"), 1),
        )


CALIBRATION_INSTANCES = 2
"""The calibration file is measured on 1A1F: two instances."""


def host_sharing(instances: int, cores: int | None) -> float:
    """How much slower each instance runs when ``instances`` single-threaded
    engine processes share ``cores`` (processor sharing), relative to the
    1A1F calibration on the same host; 1 when instances do not share."""
    if cores is None:
        return 1.0
    return max(1.0, instances / cores) / max(1.0, CALIBRATION_INSTANCES / cores)


@dataclass(frozen=True)
class CalibratedModel:
    """Stage times from linear fits to measurements on one instance per role
    (``calibration``): an FFN instance's time depends only on the tokens it
    processes (A x batch / F), the fitted intercept is kept whole; the
    exchange is split evenly into dispatch and combine. With ``host_cores``
    (the profile's ``shared_host_cores``) every stage is slowed by
    :func:`host_sharing` of the deployment's A + F instances."""

    fits: StageFits
    shape: ModelShape
    host_cores: int | None = None
    kind: str = "calibrated"

    def times(self, attention: int, ffn: int, batch: int, context: float) -> StageTimes:
        sent, received = _traffic(self.shape, attention, ffn, batch)
        exchange = max(self.fits.exchange(sent), self.fits.exchange(received))
        slow = host_sharing(attention + ffn, self.host_cores)
        return StageTimes(
            attention=self.fits.attention_time(batch, context) * slow,
            dispatch=exchange / 2 * slow,
            ffn=self.fits.ffn(attention * batch / ffn) * slow,
            combine=exchange / 2 * slow,
        )

    def linear(self, context: float) -> LinearStageModels:
        fits = self.fits
        per_token = fits.attention.slope
        if not fits.attention_per_token:
            per_token /= context
        return LinearStageModels(
            alpha_a=per_token,
            beta_a=fits.attention.intercept,
            alpha_c=fits.exchange.slope,
            beta_c=fits.exchange.intercept,
            alpha_f=fits.ffn.slope,
            beta_f=fits.ffn.intercept,
        )
