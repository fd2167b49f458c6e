"""Reports derived only from the cell files under results/runs: tables (and figures)."""
