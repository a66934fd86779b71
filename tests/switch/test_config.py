# SPDX-License-Identifier: GPL-2.0-only
"""emu.switch.config: the check of a port a user names (select_ports)."""

from __future__ import annotations

import pytest

from emu.switch.config import ConfigError, is_pattern, select_ports

PORTS = ["h1", "h2", "spine1", "spine2"]


def test_a_port_name_names_that_port() -> None:
    assert select_ports("h2", PORTS) == ["h2"]


@pytest.mark.parametrize("spec,want", [("*", PORTS), ("spine*", ["spine1", "spine2"]),
                                       ("h?", ["h1", "h2"]), ("spine[2]", ["spine2"])])
def test_a_wildcard_names_the_ports_it_matches(spec: str, want: list[str]) -> None:
    assert is_pattern(spec)
    assert select_ports(spec, PORTS) == want


def test_no_such_port_is_refused_listing_the_ports() -> None:
    with pytest.raises(ConfigError) as e:
        select_ports("h9", PORTS)
    assert str(e.value) == "no port 'h9' on this switch (its ports: h1, h2, spine1, spine2)"


def test_a_wildcard_that_matches_nothing_is_refused() -> None:
    with pytest.raises(ConfigError) as e:
        select_ports("zz*", PORTS)
    assert str(e.value) == ("'zz*' matches no port on this switch "
                            "(its ports: h1, h2, spine1, spine2)")


def test_a_name_is_not_a_wildcard_and_case_counts() -> None:
    assert not is_pattern("h1")
    with pytest.raises(ConfigError):
        select_ports("H1", PORTS)
