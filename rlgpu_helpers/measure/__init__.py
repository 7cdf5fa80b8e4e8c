"""The measuring harness, no lesson in it (introduced in notebook 00).

- ``timing``: ``time_callable`` (warm-up, device sync, repeats, median and IQR) and ``rate``, which probes once and sizes the timed runs (00);
- ``records``: ``Record``, the JSON files, ``data/reference/``, and ``select`` to filter records (00);
- ``table``: numbers with three significant digits, and records side by side in a table (00);
- ``plots``: a figure of records against a parameter, this machine beside the references (00);
- ``claims``: the guides' claims as data, the one verdict beside a measurement, ``ClaimCheck`` (01-06, 08-12).

This layer imports only from ``core``; every lesson's suite in ``bench`` builds on it.
"""
