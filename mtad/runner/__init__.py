"""The pieces of ``mtad-run`` (``mtad/run.py`` wires them together), one job per module:

- ``layout``: cell identity, the folder layout ``<experiment>/<pair>/<task>/<method>[/<overrides>]``
  and the names of a cell's files (also read by ``mtad.report.cells``);
- ``checks``: settings validated before any data or model is loaded;
- ``records``: ``samples.jsonl`` (append, resume, torn and corrupted lines) and per-sample seeds;
- ``provenance``: the environment record, with the commit read once when the process starts;
- ``devices``: model loading, devices, synchronisation, peak memory;
- ``loop``: generating, scoring and re-judging the examples of one cell;
- ``session``: the resources a run of cells shares on one pair (pair, decoders, devices, energy
  meter, environment, warm-up, peak memory) and their lifecycle, for ``mtad-run``'s single cell
  and the interleaved scheduler's many;
- ``aggregate``: a cell's metrics from its records.
"""
