"""What every method and task shares, measured (mtad/metrics/README.md; the decoding statistics
themselves are declared in ``mtad.decode_stats``):

- ``speed``: a cell's speed and acceptance totals from its generations' statistics;
- ``perplexity``: the target's log-probability of an output, and the suite's perplexity;
- ``energy``: energy meters (NVML on GPUs, RAPL on CPUs where readable, none);
- ``exactness``: tests that a method samples the target's distribution (chi-square, TV);
- ``forward_time``: the timing of one model forward at a width and context;
- ``cost_model``: modelled speed from counts on a device profile (this machine, memory-bound accelerators).
"""
