"""One GPU technique per module, each with its CPU fallback, so every lesson runs everywhere.

- ``sync``: find host-device synchronizations (the sync audit) and check without them (04).
- ``transfer``: host-device copies, pageable or pinned, and a side-stream prefetch (05).
"""
