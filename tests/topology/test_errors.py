# SPDX-License-Identifier: GPL-2.0-only
"""Every broken topology gives ONE line naming the file, the key (and line) and the problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import emu.cluster  # noqa: F401  (registers the [nic] and [switch] checkers: emu.topology.sections)
from emu.topology import TopologyError, load

LS = '[topology]\nkind = "leaf-spine"\nname = "t"\n'
PAIR = '[topology]\nkind = "pair"\nname = "t"\n'
CUSTOM = ('[topology]\nkind = "custom"\nname = "t"\n'
          '[[node]]\nname = "h1"\nkind = "host"\n[[node]]\nname = "s1"\nkind = "switch"\n')

# (file text, --set overrides, expected fragments of the message: key, reason)
CASES = {
    "syntax": (PAIR + "x = = 1\n", None, [":4:", "TOML syntax"]),
    "no topology": ("[params]\n", None, ["topology", "missing"]),
    "unknown top key": (PAIR + "[extra]\n", None, [":4:", "extra", "unknown key"]),
    "unknown topology key": (PAIR + "colour = 1\n", None, [":4:", "topology.colour", "unknown"]),
    "no kind": ('[topology]\nname = "t"\n', None,
                [":1:", "topology.kind: missing: say which topology, kind = one of pair,"]),
    "bad kind": ('[topology]\nkind = "ring"\n', None, [":2:", "topology.kind", "'ring'"]),
    "unknown param": (LS + "[params]\nhosts = 3\n", None, [":5:", "params.hosts", "unknown param"]),
    "param type": (LS + '[params]\nleaves = "two"\n', None,
                   [":5:", "params.leaves", "expected an integer"]),
    "param bool": (LS + "[params]\nleaves = true\n", None, ["params.leaves", "integer"]),
    "param range": (LS + "[params]\nhosts_per_leaf = 241\n", None,
                    ["params.hosts_per_leaf", "out of range"]),
    "param zero": (LS + "[params]\nspines = 0\n", None, ["params.spines", "out of range"]),
    "set unknown": (LS, ["hosts=4"], ["--set hosts=4", "unknown param"]),
    "set type": (LS, ["leaves=many"], ["--set leaves=many", "expected an integer"]),
    "set no equals": (LS, ["leaves"], ["--set leaves", "KEY=VALUE"]),
    "set unknown section": (LS, ["foo.bar=1"], ["--set foo.bar=1", "unknown setting"]),
    "set bad link key": (LS, ["link.speed=1"], ["--set link.speed=1", "unknown key 'speed'"]),
    "set bad mtu": (LS, ["link.mtu=20"], ["--set link.mtu=20", "out of range"]),
    "mtu high": (LS + "[defaults.link]\nmtu = 70000\n", None,
                 [":5:", "defaults.link.mtu", "out of range"]),
    "mtu below IPv6's": (LS + "[defaults.link]\nmtu = 500\n", None,
                         [":5:", "defaults.link.mtu", "mtu 500 is too small for link h1-leaf1",
                          "IPv6", "at least 1280"]),
    "set mtu below IPv6's": (LS, ["link.mtu=1279"], ["--set link.mtu=1279", "1280"]),
    "override mtu below IPv6's": (LS + '[defaults.link]\nmtu = 100\n[[link]]\n'
                                  'match = "leaf1:spine*"\nmtu = 1200\n[[link]]\n'
                                  'match = "h*:leaf*"\nmtu = 1500\n', None,
                                  [":8:", "link[0].mtu", "mtu 1200", "leaf1-spine1"]),
    "custom mtu below IPv6's": (CUSTOM + '[[link]]\na = "h1"\nb = "s1"\nmtu = 1000\n', None,
                                [":13:", "link[0].mtu", "mtu 1000", "1280"]),
    "mtu type": (LS + '[defaults.link]\nmtu = "big"\n', None, ["defaults.link.mtu", "integer"]),
    "unknown link default": (LS + "[defaults.link]\nspeed = 1\n", None,
                             [":5:", "defaults.link.speed", "unknown key"]),
    "unknown defaults": (LS + "[defaults.node]\n", None, ["defaults.node", "unknown key"]),
    "bad rate unit": (LS + '[defaults.link]\nrate = "10gbits"\n', None,
                      [":5:", "defaults.link.rate", "bad rate"]),
    "zero rate": (LS + "[defaults.link]\nrate = 0\n", None, ["defaults.link.rate", "> 0"]),
    "loss > 1": (LS + '[defaults.link]\nloss = "150%"\n', None,
                 ["defaults.link.loss", "outside 0..1"]),
    "loss bad": (LS + '[defaults.link]\necn_ce = "lots"\n', None,
                 ["defaults.link.ecn_ce", "bad probability"]),
    "duplicate > 1": (LS + '[defaults.link]\na_to_b = { duplicate = "150%" }\n', None,
                      ["defaults.link.a_to_b.duplicate", "outside 0..1"]),
    "duplicate bad": (LS + '[defaults.link]\nduplicate = "twice"\n', None,
                      ["defaults.link.duplicate", "bad probability"]),
    "seed bad": (LS + '[defaults.link]\nseed = "lucky"\n', None,
                 ["defaults.link.seed", "bad seed", "'random'"]),
    "seed negative": (LS + "[defaults.link]\nseed = -1\n", None,
                      ["defaults.link.seed", "out of range"]),
    "delay bad": (LS + '[defaults.link]\ndelay = "2 fortnights"\n', None,
                  ["defaults.link.delay", "bad time"]),
    "dir unknown key": (LS + "[defaults.link]\na_to_b = { mtu = 1500 }\n", None,
                        ["defaults.link.a_to_b.mtu", "unknown key"]),
    "dir not table": (LS + "[defaults.link]\nb_to_a = 3\n", None,
                      ["defaults.link.b_to_a", "expected a table"]),
    "up not bool": (LS + '[defaults.link]\nup = "yes"\n', None, ["defaults.link.up", "true or"]),
    "override no match": (LS + '[[link]]\nmatch = "leaf1:leaf2"\nmtu = 1500\n', None,
                          [":5:", "link[0].match", "matches no link"]),
    "override missing match": (LS + "[[link]]\nmtu = 1500\n", None, ["link[0].match", "missing"]),
    "override unknown key": (LS + '[[link]]\nmatch = "h1-leaf1"\nbw = 1\n', None,
                             [":6:", "link[0].bw", "unknown key"]),
    "node in generated": (LS + '[[node]]\nname = "x"\n', None, ["node[0]", "custom"]),
    "custom params": (CUSTOM + "[params]\nx = 1\n", None, ["params.x", "no parameters"]),
    "dangling link": (CUSTOM + '[[link]]\na = "h1"\nb = "s9"\n', None,
                      [":12:", "link[0].b", "unknown node 's9'"]),
    "missing link end": (CUSTOM + '[[link]]\na = "h1"\n', None, ["link[0].b", "missing"]),
    "self link": (CUSTOM + '[[link]]\na = "s1"\nb = "s1"\n', None, ["link[0].b", "itself"]),
    "duplicate node": (CUSTOM + '[[node]]\nname = "h1"\nkind = "switch"\n', None,
                       [":11:", "node[2].name", "duplicate node name 'h1'", "node[0]"]),
    "bad node name": (CUSTOM + '[[node]]\nname = "Bad_Name"\nkind = "host"\n', None,
                      ["node[2].name", "[a-z0-9]"]),
    "long node name": (CUSTOM + f'[[node]]\nname = "{"n" * 33}"\nkind = "host"\n', None,
                       ["node[2].name", "32"]),
    "bad node kind": (CUSTOM + '[[node]]\nname = "r"\nkind = "router"\n', None,
                      ["node[2].kind", "'router'"]),
    "ifname too long": (CUSTOM + '[[link]]\na = "h1"\nb = "s1"\nb_if = "a-very-long-port0"\n',
                        None, ["link[0].b_if", "'a-very-long-port0'", "Linux allows (15)"]),
    "derived ifname too long": (
        CUSTOM + f'[[node]]\nname = "{"x" * 16}"\nkind = "host"\n'
        f'[[link]]\na = "{"x" * 16}"\nb = "s1"\n', None, ["link[0].b_if", "15"]),
    "ifname duplicate": (CUSTOM + '[[link]]\na = "h1"\nb = "s1"\nb_if = "p"\n'
                         '[[link]]\na = "h1"\nb = "s1"\nb_if = "p"\n', None,
                         ["link[1].b_if", "used twice"]),
    "ifname slash": (CUSTOM + '[[link]]\na = "h1"\nb = "s1"\na_if = "e/0"\n', None,
                     ["link[0].a_if", "not a valid"]),
    "custom link unknown key": (CUSTOM + '[[link]]\na = "h1"\nb = "s1"\nmatch = "x"\n', None,
                                ["link[0].match", "unknown key"]),
    "custom no nodes": ('[topology]\nkind = "custom"\n', None, ["node", "needs [[node]]"]),
    "event unknown target": (LS + '[[event]]\nat = "1s"\naction = "down"\ntarget = "leaf9"\n',
                             None, [":7:", "event[0].target", "unknown target 'leaf9'"]),
    "event bad action": (LS + '[[event]]\nat = "1s"\naction = "explode"\ntarget = "leaf1"\n',
                         None, ["event[0].action", "'explode'"]),
    "event bad at": (LS + '[[event]]\nat = "soon"\naction = "down"\ntarget = "leaf1"\n', None,
                     [":5:", "event[0].at", "bad time"]),
    "event missing at": (LS + '[[event]]\naction = "down"\ntarget = "leaf1"\n', None,
                         ["event[0].at", "missing"]),
    "event impair empty": (LS + '[[event]]\nat = 1\naction = "impair"\ntarget = "h1-leaf1"\n',
                           None, ["event[0]", "at least one"]),
    "event down settings": (LS + '[[event]]\nat = 1\naction = "down"\ntarget = "h1-leaf1"\n'
                            'loss = 0.1\n', None, ["event[0]", "takes no settings"]),
    "event no plane": (LS + '[[event]]\nat = 1\naction = "down"\ntarget = "plane:3"\n', None,
                       ["event[0].target", "no plane 3"]),
    "event plane not a number": (LS + '[[event]]\nat = 1\naction = "down"\ntarget = "plane:x"\n',
                                 None, ["event[0].target", "bad plane number"]),
    "event unknown key": (LS + '[[event]]\nat = 1\naction = "down"\ntarget = "h1"\nwhen = 2\n',
                          None, ["event[0].when", "unknown key"]),
    "routing mode": (LS + '[routing]\nmode = "ospf"\n', None, [":5:", "routing.mode", "'ospf'"]),
    "routing seed": (LS + "[routing]\nhash_seed = -1\n", None, ["routing.hash_seed", "range"]),
    "routing key": (LS + "[routing]\npolicy = 1\n", None, ["routing.policy", "unknown key"]),
    "routing srv6": (LS + '[routing]\nmode = "srv6"\nsrv6 = "xdp"\n', None,
                     ["routing.srv6", "'xdp'", "auto, kernel, bpf"]),
    "cluster name long": ('[topology]\nkind = "pair"\nname = "a-very-long-name"\n', None,
                          [":3:", "topology.name", "12"]),
    "cluster name bad": ('[topology]\nkind = "pair"\nname = "Big"\n', None,
                         ["topology.name", "[a-z0-9]"]),
    "link not array": (LS + "[link]\nmtu = 1\n", None, ["link", "array of tables"]),
    "nic transport": (LS + '[nic.srd]\ncc = "nscc"\n', None, ["nic.srd", "unknown transport"]),
    "nic option": (LS + "[nic.uet]\ncolour = 1\n", None,
                   ["nic.uet.colour", "unknown uet engine option"]),
    "nic value": (LS + '[nic.uet]\ncc = "tcp"\n', None, [":5:", "nic.uet.cc", "'tcp'"]),
    "nic range": (LS + "[nic.roce]\nline_rate = -1\n", None, ["nic.roce", "line_rate"]),
    "nic rate": (LS + '[nic.roce]\nline_rate = "fast"\n', None,
                 [":5:", "nic.roce.line_rate", "bad rate 'fast'"]),
    "nic not table": (LS + "[nic]\nuet = 3\n", None, ["nic.uet", "expected a table"]),
    "set nic option": (LS, ["nic.uet.paths=random"], ["--set nic.uet.paths=random", "random"]),
    "nic coalesce": (LS + '[nic]\nrx_coalesce = "soon"\n', None,
                     ["nic.rx_coalesce", "adaptive"]),
    "nic coalesce range": (LS, ["nic.rx_coalesce=20ms"], ["nic.rx_coalesce", "10 ms"]),
}


@pytest.mark.parametrize("case", CASES)
def test_error_is_one_line_naming_file_and_key(tmp_path: Path, case: str) -> None:
    text, sets, fragments = CASES[case]
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        load(path, sets)
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert msg.startswith(str(path)), msg
    for frag in fragments:
        assert frag in msg, (frag, msg)


def test_cluster_name_from_long_stem(tmp_path: Path) -> None:
    path = tmp_path / "much-too-long-a-name.toml"
    path.write_text('[topology]\nkind = "pair"\n')
    with pytest.raises(TopologyError, match="topology.name.*--name"):
        load(path)
    with pytest.raises(TopologyError, match="--name"):
        load(path, name="UPPER")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="cannot read"):
        load(tmp_path / "nope.toml")


def test_capacity_error_custom(tmp_path: Path) -> None:
    nodes = "".join(f'[[node]]\nname = "h{i}"\nkind = "host"\n' for i in range(241))
    links = "".join(f'[[link]]\na = "h{i}"\nb = "s1"\n' for i in range(241))
    path = tmp_path / "big.toml"
    path.write_text('[topology]\nkind = "custom"\nname = "big"\n'
                    '[[node]]\nname = "s1"\nkind = "switch"\n' + nodes + links)
    with pytest.raises(TopologyError, match=r"node\[0\].*241 host ports.*240"):
        load(path)


def test_section_without_its_checker_is_refused_not_accepted() -> None:
    """The topology layer cannot check [nic]/[switch] itself (their owners sit above it):
    loaded alone, it refuses such a file with a line naming the module to import, and
    the same text checks normally once the owner registered its checker."""
    text = LS + '[nic.uet]\ncc = "tcp"\n'
    code = (
        "from emu.topology import loads, TopologyError\n"
        f"text = {text!r}\n"
        "try:\n    loads(text); print('accepted')\n"
        "except TopologyError as e:\n    print(e)\n"
        "import emu.nic.topology\n"
        "try:\n    loads(text); print('accepted')\n"
        "except TopologyError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == "<string>: nic: [nic] cannot be checked: its checker is not loaded " \
                     "(import emu.nic.topology)", out
    assert out[1].startswith("<string>:5: nic.uet.cc:") and "'tcp'" in out[1], out
