"""``python -m rlgpu_helpers``: see :mod:`rlgpu_helpers.cli`."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
