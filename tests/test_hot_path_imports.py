# SPDX-License-Identifier: GPL-2.0-only
"""The daemons' hot path (codecs, ICRC, EV placement) and ``emu dissect`` load no scapy."""

import subprocess
import sys


def test_codecs_and_dissect_import_no_scapy():
    code = (
        "import sys\n"
        "import emu.wire, emu.wire.codec.roce, emu.wire.codec.mrc, emu.wire.codec.uet\n"
        "import emu.wire.icrc, emu.wire.ev, emu.wire.dissect, emu.wire.summary\n"
        "loaded = sorted(m for m in sys.modules if m == 'scapy' or m.startswith('scapy.'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
