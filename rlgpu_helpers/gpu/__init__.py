"""One GPU technique per module, each with its CPU fallback, so every lesson runs everywhere.

- ``sync``: find host-device synchronizations (the sync audit) and check without them (04).
- ``transfer``: host-device copies, pageable or pinned, and a side-stream prefetch (05).
- ``memory``: peak memory of a call, and the largest batch that fits (06).
- ``monitor``: utilization sampled in the background, and the profiler over PPO (06).
- ``accumulate``: one optimizer step over K micro-batches, and the proof it equals the full batch (07).
- ``precision``: the precision policy (bf16, fp16 + GradScaler, TF32, fp32) and a step in it (08).
- ``graphs``: launch overhead, ``torch.compile`` and CUDA graphs of the env step and the update (09).
- ``distributed``: data-parallel PPO with DDP under ``torchrun``, gloo on CPUs, NCCL on GPUs (10).
"""
