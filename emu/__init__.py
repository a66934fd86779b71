# SPDX-License-Identifier: GPL-2.0-only
"""emu — packet-level emulator of AI-fabric RDMA transports (RoCEv2, UET, MRC)."""

__version__ = "0.1.0"
