"""tracekit: why was the GPU idle, and what changed between two runs?"""

from __future__ import annotations

__version__ = "0.1.0"
