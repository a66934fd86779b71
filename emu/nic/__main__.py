# SPDX-License-Identifier: GPL-2.0-only
"""``python -m emu.nic run|stats …`` = ``emu nicd run|stats …``."""

import sys

from emu.nic.cli import main

sys.exit(main())
