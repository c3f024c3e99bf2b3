"""Renderers of analysis results: text (rich terminal), json (DESIGN.md contract), markdown."""

from __future__ import annotations

from tracekit.render.base import Renderer, Section, get_renderer, renderers

__all__ = ["Renderer", "Section", "get_renderer", "renderers"]
