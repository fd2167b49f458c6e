"""The cost model (``mtad.metrics.cost_model``) held against the bench's own measurements.

Each method's row of the pair's own target carries the counts of its median repetition. From them
and this machine's cost curves (the same run's ``curve``, at the row's path and the run's thread
count) the model gives a speed-up over sampling; it must agree with the measured one within
``AGREEMENT`` (the model's test). Beside it, the same counts on a memory-bound accelerator
(``DEFAULT_ACCELERATOR``): modelled, never measured.
"""

from __future__ import annotations

from mtad.metrics.cost_model import (
    ACCELERATORS,
    DEFAULT_ACCELERATOR,
    PAIR_SIZES,
    Counts,
    DeviceProfile,
    accelerator_profile,
    from_bench,
    modelled_speedup,
)

AGREEMENT = 0.10  # |modelled / measured − 1| at most this, for every method on every path modelled


def _beam_width(row: dict) -> int | None:
    return (row.get("params") or {}).get("beam_width")


def machine_profile(payload: dict, path: str) -> DeviceProfile | None:
    """This machine at the pair's target dtype on ``path``: the curves measured at the run's thread
    count, host work per call as sampling's time outside the forwards (``other_frac`` of its ms per
    token: one call per token). None when the run has no such curve or sampling row."""
    env = payload["environment"]
    threads = env.get("threads")
    sampling = next((r for r in payload["rows"] if r["label"] == f"sampling {path}"), None)
    if not payload.get("curve") or sampling is None:
        return None
    curves = [c for c in payload["curve"]["curves"] if c["path"] != "fast" or c.get("threads") == threads]
    try:
        dtype = str(env["target_dtype"]).removeprefix("torch.")  # the run records torch's name of it
        profile = from_bench({**payload, "curve": {**payload["curve"], "curves": curves}}, dtype, path)
    except KeyError:
        return None
    host = sampling["other_frac"] * sampling["ms_per_token"]
    return DeviceProfile(profile.name, profile.target_ms, profile.draft_ms, host, profile.sources)


def modelled_rows(payload: dict, accelerator: str = DEFAULT_ACCELERATOR) -> list[dict]:
    """Per method and path with counts: measured and modelled speed-ups over sampling (this machine),
    whether they agree within ``AGREEMENT``, and the accelerator's modelled speed-up."""
    pair = payload["setup"]["pair"]
    on_device = accelerator_profile(pair, accelerator) if pair in PAIR_SIZES else None
    out = []
    for path in ("eager", "fast"):
        profile = machine_profile(payload, path)
        rows = [r for r in payload["rows"] if r["impl"] == "ours" and r["path"] == path and not r.get("target_dtype")]
        base = next((r for r in rows if r["method"] == "sampling" and r.get("counts")), None)
        if profile is None or base is None:
            continue
        baseline = Counts.of(base["counts"])
        for r in rows:
            if r["method"] == "sampling" or not r.get("counts"):
                continue
            counts = Counts.of(r["counts"], _beam_width(r))
            modelled = modelled_speedup(counts, profile, baseline)
            measured = r.get("speedup_vs_sampling")
            out.append(
                {
                    "label": r["label"],
                    "method": r["method"],
                    "path": path,
                    "measured": measured,
                    "modelled": modelled,
                    "agrees": None if measured is None else abs(modelled / measured - 1) <= AGREEMENT,
                    "accelerator": ACCELERATORS[accelerator].name,
                    "modelled_on_accelerator": on_device and modelled_speedup(counts, on_device, baseline),
                }
            )
    return out
