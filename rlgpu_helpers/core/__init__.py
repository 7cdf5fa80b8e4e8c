"""What every lesson uses (introduced in notebook 00).

- ``config``: quick mode (``pick``) and seeding (00);
- ``checks``: the one set of argument checks, TypeError for a wrong type, ValueError for a bad value (00);
- ``device``: which device to use, what the machine is, waiting for the device (00);
- ``files``: the ``data/`` folder and atomic writes (00, 11);
- ``args``: argparse types that name the bad value, and ``--set NAME=VALUE`` (11, 12);
- ``logs``: quieting a library's logger for a block (05, 10);
- ``compat``: workarounds for the torch versions the course supports, each naming the version that ends it (04, 06).
"""
