# SPDX-License-Identifier: GPL-2.0-only
"""Interop runner: transport implementations tested against each other.

``contract`` (the documented endpoint contract), ``endpoint`` (emu's own
endpoint), ``testcases`` (what each case lays out and checks), ``wirecheck``
(what a capture must show), ``impls`` (the implementations file, ``emu@REF``),
``runner`` (clusters, processes, logs), ``result`` (matrix, JSON, Markdown),
``cli`` (``emu interop run|list``). See ``docs/interop.md``.
"""
