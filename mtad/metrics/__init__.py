"""What every method and task shares, measured (mtad/metrics/README.md; the decoding statistics
themselves are declared in ``mtad.decode_stats``):

- ``speed``: a cell's speed and acceptance totals from its generations' statistics;
- ``perplexity``: the target's log-probability of an output, and the suite's perplexity;
- ``energy_meters``: energy meters (NVML on GPUs, RAPL on CPUs where readable, none);
- ``exact_enumeration``: the exact distribution of a few tokens and a decoder's seeded draws
  counted beside it (their tests: ``mtad.stats.goodness_of_fit``);
- ``acceptance_terms``: the glossary of acceptance figures, and the per-token α;
- ``cost_model``: modelled speed from counts on a device profile (this machine, memory-bound accelerators).
"""
