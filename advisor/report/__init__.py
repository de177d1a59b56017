"""Rendering: self-contained HTML reports and rich terminal summaries (recommend, diff)."""
from __future__ import annotations

from .html import render_diff, render_recommendation
from .terminal import print_diff, print_recommendation

__all__ = ["render_recommendation", "render_diff", "print_recommendation", "print_diff"]
