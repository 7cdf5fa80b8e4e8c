"""Test-suite wiring, for the unit tests and the notebooks alike.

Quick mode shrinks every size so the whole suite runs in minutes. It is set here, in the
process environment, so the Jupyter kernels nbval starts inherit it too. An explicit
`RLGPU_QUICK=0 pytest` runs the notebooks at full size instead.
"""

import os

os.environ.setdefault("RLGPU_QUICK", "1")
