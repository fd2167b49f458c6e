"""Reports derived only from the files a run wrote (cells, ``theory.json``); nothing here runs a model:

- ``cells``: every cell under a results root as one pandas frame; ``examples``: per-example rows;
- ``tables``: Table 2 (Markdown and CSV, with intervals, coverage and conditions);
- ``sweeps`` and ``figures``: the figures' frames (planned cells kept as rows) and the figures;
- ``claims`` and ``claims_markdown``: every claim of the paper with an interval and a verdict, its
  rows (``claim_row``) from the claim kinds (``kind_claims``: C1 to C4) and ``theory.json``
  (``theory_claims``: C5, C6);
- ``reproduce``: two runs of a cell compared exactly; ``agreement``: statistically, across machines;
- ``roots``: the options every report script shares (``--results``, ``--experiment``, ``--overrides``,
  ``--out``) and where they resolve;
- ``values``: missing-value helpers.
"""
