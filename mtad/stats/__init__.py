"""The statistics every reader of results shares, below the experiments and the report.

- ``intervals``: paired bootstrap intervals over prompts, detectable effects, the verdict rule;
- ``agreement``: whether two measurements of one figure agree (Bonferroni over a family);
- ``goodness_of_fit``: whether seeded draws follow an exact distribution (chi-square, its power, TV).
"""
