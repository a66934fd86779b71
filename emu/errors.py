# SPDX-License-Identifier: GPL-2.0-only
"""Errors every layer may raise, so none needs to import the one above it to do so.

:class:`UserError` is how a command says "your input is wrong" (a missing
file, a capture that is not one, an unknown cluster): the ``emu`` command
line (:mod:`emu.cli`) prints it as one line and exits 2, and a traceback
stays reserved for bugs. It lives in this bottom module, not in the command
line, because the modules that detect such mistakes (``emu dissect`` in
``emu.wire``, the cluster commands) sit below the command line that prints
them, and a layer imports only downward.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake on the command line or in a file: printed as one line, exit status 2."""
