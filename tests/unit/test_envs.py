# SPDX-License-Identifier: Apache-2.0
"""The plugin's environment variables: typed, defaulted, and a bad value is an
error that names the variable."""

from __future__ import annotations

import pytest

from afd_plugin import envs


def test_switch_interval_is_unset_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AFD_SWITCH_INTERVAL_US", raising=False)
    assert envs.get("AFD_SWITCH_INTERVAL_US") is None
    monkeypatch.setenv("AFD_SWITCH_INTERVAL_US", "200")
    assert envs.get("AFD_SWITCH_INTERVAL_US") == 200.0


@pytest.mark.parametrize("bad", ["0", "-5", "fast"])
def test_a_bad_value_names_the_variable(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AFD_SWITCH_INTERVAL_US", bad)
    with pytest.raises(ValueError, match="environment variable AFD_SWITCH_INTERVAL_US"):
        envs.get("AFD_SWITCH_INTERVAL_US")


def test_flags_accept_the_usual_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    for text, value in (("1", True), ("true", True), ("off", False), ("", False)):
        monkeypatch.setenv("AFD_PLUGIN_DISABLE", text)
        assert envs.get("AFD_PLUGIN_DISABLE") is value
    monkeypatch.setenv("AFD_PLUGIN_DISABLE", "maybe")
    with pytest.raises(ValueError, match="AFD_PLUGIN_DISABLE"):
        envs.get("AFD_PLUGIN_DISABLE")
