# SPDX-License-Identifier: GPL-2.0-only
"""The plan of a cluster: a topology resolved once into every setting ``emu up`` uses.

:func:`build` makes it (rates and delays per port in fabric and wall units, the
time scale and why, each NIC daemon's arguments, each switch daemon's
configuration and datapath, the capacity verdict); ``emu up`` keeps it in the
cluster's state file under ``plan`` and starts everything from it;
``emu up --dry-run`` prints it (:func:`render`) and makes nothing.
"""

from __future__ import annotations

from emu.plan.build import TX_LEAD, build, time_plan, wall_model
from emu.plan.model import NicPlan, NicPort, Plan, PortPlan, SwitchPlan, TimePlan
from emu.plan.render import render

__all__ = ["TX_LEAD", "NicPlan", "NicPort", "Plan", "PortPlan", "SwitchPlan", "TimePlan",
           "build", "render", "time_plan", "wall_model"]
