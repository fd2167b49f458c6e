"""One cell of the tiny random pair run in this process as a Hydra job runs it (`mtad.run.run_cell`):
for tests of what a run logs, per example or per process."""

from pathlib import Path


def run_tiny_cell(root: Path, method: str, logger=None, task: str = "chat", extra: tuple[str, ...] = ()):
    """Run ``method`` on the first 2 examples of ``task`` (held-out chat prompts) into ``root``, with
    ``extra`` overrides; returns the cell's plan."""
    from hydra.core.hydra_config import HydraConfig

    from mtad.configs import compose
    from mtad.run import run_cell
    from mtad.runner.cell import plan_cell
    from mtad.runner.layout import resolve_cell
    from mtad.tracking import NullLogger

    overrides = ["pair=tiny_llama", f"method={method}", f"task={task}", "limit=2", "logger=none", "energy=none"]
    overrides += ["progress=false", "warmup_tokens=0", f"results_root={root}", *extra]
    with_hydra, cfg = compose(overrides, hydra=True), compose(overrides)  # a job's config holds no hydra node
    HydraConfig.instance().set_config(with_hydra)
    plan = plan_cell(cfg, resolve_cell(cfg, with_hydra.hydra))
    run_cell(cfg, plan, logger or NullLogger())
    return plan
