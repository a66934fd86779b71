# SPDX-License-Identifier: GPL-2.0-only
import sys

from emu.cli import main

sys.exit(main())
