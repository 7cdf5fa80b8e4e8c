"""The measuring harness, no lesson in it (introduced in notebook 00).

- ``timing``: ``time_callable`` (warm-up, device sync, repeats, median and IQR), and ``rate``,
  which probes once and then sizes the timed runs;
- ``records``: ``Record``, the JSON files, ``data/reference/``, and ``select`` to filter records;
- ``table``: numbers with three significant digits, and records side by side in a table;
- ``plots``: a figure of records against a parameter, this machine beside the references;
- ``claims``: the guides' claims as data, the one verdict beside a measurement, ``ClaimCheck``.

This layer imports only from ``core``; every lesson's suite in ``bench`` builds on it.
"""
