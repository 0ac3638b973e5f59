# SPDX-License-Identifier: Apache-2.0
"""Standby FFN servers in the config and the deployment validator, and where
a promoted standby resumes a step (``failover_resume``): pure, no torch."""

from __future__ import annotations

from typing import Any

import pytest

from afd_plugin.config import parse_afd_config
from afd_plugin.errors import AFDConfigError
from afd_plugin.failover_resume import DONE, ResumeRecord, resume_starts
from afd_plugin.validation import Deployment, check_deployment
from afd_plugin.wire import AFDWireError

PLATFORM = {
    "P2pGlooAFDConnector": "cpu",
    "P2pNcclAFDConnector": "cuda",
    "CAMP2pAFDConnector": "npu",
    "CAMAsyncAFDConnector": "npu",
}


def config(connector: str = "P2pGlooAFDConnector", **afd: Any):
    gate = connector == "CAMAsyncAFDConnector"
    return parse_afd_config(
        {
            "afd": {
                "role": "ffn",
                "connector": connector,
                "compute_gate_on_attention": gate,
                **afd,
            }
        }
    )


def problems(cfg: Any, **dep: Any) -> dict[str, str]:
    deployment = Deployment(
        platform=dep.pop("platform", PLATFORM[cfg.connector]),
        architecture="DeepseekV2ForCausalLM",
        **dep,
    )
    return {e.path: e.message for e in check_deployment(cfg, deployment)}


def test_only_an_ffn_server_with_standby_places_is_a_standby() -> None:
    with pytest.raises(AFDConfigError) as caught:
        config(role="attention", standby=True)
    text = str(caught.value)
    assert "additional_config.afd.standby" in text
    assert "only an FFN server can be a standby; role is 'attention'" in text
    assert "additional_config.afd.num_ffn_standby" in text  # both listed at once
    with pytest.raises(AFDConfigError, match="num_ffn_standby: must be greater"):
        config(num_ffn_standby=-1)
    assert config(standby=True, num_ffn_standby=2).standby


@pytest.mark.parametrize(
    "connector",
    ["P2pNcclAFDConnector", "CAMP2pAFDConnector", "CAMAsyncAFDConnector"],
)
def test_connectors_that_cannot_promote_standbys_refuse_them(connector: str) -> None:
    found = problems(config(connector, num_ffn_standby=1))
    message = found["additional_config.afd.num_ffn_standby"]
    assert f"{connector} cannot promote standby FFN servers" in message
    assert "set 0, or use P2pGlooAFDConnector" in message
    assert "additional_config.afd.num_ffn_standby" not in problems(config(connector))


def test_a_standby_is_one_ffn_rank_whatever_num_ffn_ranks_says() -> None:
    cfg = config(
        standby=True, num_ffn_standby=1, num_ffn_ranks=2, num_attention_ranks=2
    )
    assert problems(cfg) == {}
    found = problems(cfg, dp=2)
    assert "DP x TP x PP = 2 x 1 x 1" in found["additional_config.afd.standby"]
    # the FFN servers proper still match their rank count
    assert problems(config(num_ffn_standby=1, num_ffn_ranks=2, num_attention_ranks=2))


LAYERS = (0, 1, 2, 3)


@pytest.mark.parametrize(
    ("pending", "answered", "starts"),
    [
        ([], {}, (0, 0)),  # nothing sent yet: the whole step
        ([(2, 0)], {0: 1, 1: 1}, (2, 2)),  # stage 1 got layer 1, sends 2 next
        ([(2, 0), (1, 1)], {0: 1, 1: 0}, (2, 1)),  # one pending per stage
        ([(3, 1)], {0: 3, 1: 2}, (DONE, 3)),  # stage 0 has the whole step
        ([], {0: 3, 1: 3}, (DONE, DONE)),
    ],
)
def test_each_stage_resumes_at_its_pending_input_or_after_its_last_answer(
    pending: list[tuple[int, int]], answered: dict[int, int], starts: tuple
) -> None:
    assert resume_starts(LAYERS, 2, pending, answered) == starts


def test_the_resume_record_round_trips_and_refuses_garbage() -> None:
    record = ResumeRecord(step=81, starts=(2, DONE))
    assert ResumeRecord.decode(record.encode()) == record
    for raw in (
        b"",
        b"[]",
        b'{"resume": 2, "step": 1, "starts": [0]}',
        b'{"resume": 1, "step": -1, "starts": [0]}',
        b'{"resume": 1, "step": 1, "starts": []}',
        b'{"resume": 1, "step": 1, "starts": [true]}',
        b"x" * 5000,
    ):
        with pytest.raises(AFDWireError):
            ResumeRecord.decode(raw)
