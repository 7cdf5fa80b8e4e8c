"""What every lesson uses (introduced in notebook 00).

- ``config``: quick mode (``pick``) and seeding;
- ``checks``: the one set of argument checks (TypeError for a wrong type, ValueError for a bad value);
- ``device``: which device to use, what the machine is, waiting for the device;
- ``files``: the ``data/`` folder and atomic writes.
"""
