"""Helpers for the course "Making reinforcement learning use a GPU well", taught with Snake.

Each module holds one concept and names the notebook that introduces it.
"""

__version__ = "0.1.0"
