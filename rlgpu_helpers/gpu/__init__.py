"""One GPU technique per module, each with its CPU fallback, so every lesson runs everywhere.

These modules know nothing of PPO or of benchmark suites: the learners that use them are in
``learn``, the suites that measure them in ``bench``.

- ``sync``: find host-device synchronizations (the sync audit) and check without them (04).
- ``launches``: count the operations a call launches and the bytes it moves; a quiet profiler (04).
- ``transfer``: host-device copies, pageable or pinned, and a side-stream prefetch (05).
- ``memory``: peak memory of a call, and the largest batch that fits (06).
- ``monitor``: utilization sampled in the background, NVML or psutil (06).
- ``accumulate``: one optimizer step over K micro-batches, and the proof it equals the full batch (07).
- ``precision``: the precision policy (bf16, fp16 + GradScaler, TF32, fp32), autocast, TF32 in one place (08).
- ``graphs``: ``torch.compile`` with its graph breaks, hand-captured CUDA graphs, graph-safe Adam (09).
- ``distributed``: the process group, all-reduce counting, a split batch's statistics (10).
"""
