"""Quieting a library's logger for a block: the course shows its own verdicts, not the library's chatter.

Introduced in notebook 05 (TorchRL's storages); notebook 10's all-reduce check uses it too.
"""

from __future__ import annotations

import contextlib
import logging


@contextlib.contextmanager
def only_logs_from(name: str, level: int):
    """Within the block, the logger ``name`` passes on only records of ``level`` or above; after it, as before."""
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)
