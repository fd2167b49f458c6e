"""The pieces of ``mtad-run`` (``mtad/run.py`` wires them together), one job per module:

- ``layout``: cell identity, the folder layout ``<experiment>/<pair>/<task>/<method>[/<overrides>]``
  and the names of a cell's files (also read by ``mtad.report.cells``);
- ``checks``: settings validated before any data or model is loaded;
- ``loop``: generating, scoring and re-judging the examples of one cell;
- ``session``: the resources a run of cells shares on one pair (pair, decoders, devices, energy
  meter, environment, warm-up, peak memory) and their lifecycle, for ``mtad-run``'s single cell
  and the interleaved scheduler's many;
- ``aggregate``: a cell's metrics from its records;
- ``lock``: one writer per cell; ``offline``: hub access settled once per run;
- ``multirun``: a grid planned before its first cell; ``progress``: the one line per cell of a
  multirun (cell k of n, ETA); ``interrupt``: what Ctrl-C leaves, in one line.

Below it, shared with the report, the experiments and the bench: ``mtad.records`` (records and JSON
files), ``mtad.provenance`` (the environment record and code state), ``mtad.devices`` (devices,
synchronisation, peak memory).
"""
