"""The cost model (``mtad.metrics.cost_model``) held against the bench's own measurements.

Every timed generation of the pair's own target records its counts and where its time went
(prefill, target forwards, draft forwards, the rest). The model's test is held-out prediction: for
each prompt, a profile is fitted (``fit_profile``) to the same repetition's generations of the *other*
prompts, all methods on the path together, and predicts this prompt's generations from their counts
alone. A method's modelled speed-up over sampling is its tokens over its predicted seconds, summed over
every timed generation, over sampling's; the measured speed-up it is held against is the same sum of
the measured seconds. It must agree within ``AGREEMENT``. The sums, not the rows' medians over
repetitions, because the model predicts seconds, which add over generations: a median picks one
repetition for the measured and perhaps another for the modelled, so the comparison would carry that
one repetition's error instead of the run's. Beside it, the same counts with the isolated forwards of
the run's cost curve (``from_bench``, host work as sampling's), and on a memory-bound accelerator
(``DEFAULT_ACCELERATOR``): modelled, never measured.
"""

from __future__ import annotations

from mtad.metrics.cost_model import (
    ACCELERATORS,
    DEFAULT_ACCELERATOR,
    PAIR_SIZES,
    Counts,
    DeviceProfile,
    GenerationCost,
    accelerator_profile,
    fit_profile,
    from_bench,
    modelled_seconds,
    modelled_speedup,
)

AGREEMENT = 0.10  # |modelled / measured − 1| at most this, for every method on every path modelled


def generation_costs(row: dict) -> list[tuple[int, int, GenerationCost]]:
    """(repetition, prompt, cost) of each timed generation a bench row recorded."""
    return [
        (
            g["rep"],
            g["prompt"],
            GenerationCost(
                row["method"],
                Counts.of(g, row.get("params")),
                g["seconds"],
                g["prefill_seconds"],
                g["target_seconds"],
                g["draft_seconds"],
            ),
        )
        for g in row.get("generations") or []
    ]


def held_out_speeds(rows: list[dict]) -> dict[str, tuple[float, float]] | None:
    """label -> (measured, predicted) tokens/s over every timed generation of the row: its tokens over
    the sum of its measured seconds, and over the sum of its predicted ones. Each generation is
    predicted by a profile fitted to the same repetition's generations of the other prompts: the configs
    alternate within a repetition, so its profile is the machine of that stretch of time (a shared VM
    drifts by tens of percent between repetitions). None when the run has one prompt."""
    costs = {r["label"]: generation_costs(r) for r in rows}
    every = [c for cs in costs.values() for c in cs]
    if len({prompt for _, prompt, _ in every}) < 2:
        return None
    folds = {(rep, prompt) for rep, prompt, _ in every}
    fits = {(rep, p): fit_profile([c for r, q, c in every if r == rep and q != p]) for rep, p in folds}
    speeds = {}
    for label, cs in costs.items():
        if not cs:
            continue
        tokens = sum(c.counts.new_tokens for _, _, c in cs)
        measured = sum(c.seconds for _, _, c in cs)
        predicted = sum(modelled_seconds(c.counts, fits[rep, prompt].profile(c.method)) for rep, prompt, c in cs)
        speeds[label] = (tokens / measured, tokens / predicted)
    return speeds


def isolated_profile(payload: dict, path: str) -> DeviceProfile | None:
    """This machine from the run's isolated forwards (its cost curve at the run's thread count), host
    work per call as sampling's time outside the forwards. None when the run has no such curve."""
    env = payload["environment"]
    sampling = next((r for r in payload["rows"] if r["label"] == f"sampling {path}"), None)
    if not payload.get("curve") or sampling is None:
        return None
    curves = [c for c in payload["curve"]["curves"] if c["path"] != "fast" or c.get("threads") == env.get("threads")]
    try:
        dtype = str(env["target_dtype"]).removeprefix("torch.")  # the run records torch's name of it
        profile = from_bench({**payload, "curve": {**payload["curve"], "curves": curves}}, dtype, path)
    except KeyError:
        return None
    host = sampling["other_frac"] * sampling["ms_per_token"]
    return DeviceProfile(profile.name, profile.target_ms, profile.draft_ms, host, profile.sources)


def modelled_rows(payload: dict, accelerator: str = DEFAULT_ACCELERATOR) -> list[dict]:
    """Per method and path with counts: measured speed-ups over sampling (the row's, its range over
    repetitions, and over all its timed generations pooled), the held-out modelled one of the same
    generations and whether it agrees with the pooled measurement within ``AGREEMENT``, the isolated
    forwards' modelled speed-up, and the accelerator's."""
    pair = payload["setup"]["pair"]
    on_device = accelerator_profile(pair, accelerator) if pair in PAIR_SIZES else None
    out = []
    for path in ("eager", "fast"):
        rows = [r for r in payload["rows"] if r["impl"] == "ours" and r["path"] == path and not r.get("target_dtype")]
        base = next((r for r in rows if r["method"] == "sampling" and r.get("counts")), None)
        if base is None:
            continue
        speeds = held_out_speeds(rows) or {}
        isolated = isolated_profile(payload, path)
        baseline = Counts.of(base["counts"], base.get("params"))
        for r in rows:
            if r["method"] == "sampling" or not r.get("counts"):
                continue
            counts = Counts.of(r["counts"], r.get("params"))
            measured = r.get("speedup_vs_sampling")
            # the ratio repetition by repetition (beside sampling in the same minute): its spread is the
            # measurement's resolution
            paired = [m / s for m, s in zip(r.get("tokens_per_s_reps") or [], base.get("tokens_per_s_reps") or [])]
            pooled, modelled = None, None
            if r["label"] in speeds and base["label"] in speeds:
                (mine, predicted), (sampling, sampling_predicted) = speeds[r["label"]], speeds[base["label"]]
                pooled, modelled = mine / sampling, predicted / sampling_predicted
            out.append(
                {
                    "label": r["label"],
                    "method": r["method"],
                    "path": path,
                    "measured": measured,
                    "measured_range": (min(paired), max(paired)) if paired else None,
                    "measured_pooled": pooled,
                    "modelled": modelled,
                    "agrees": None if None in (pooled, modelled) else abs(modelled / pooled - 1) <= AGREEMENT,
                    "modelled_isolated": isolated and modelled_speedup(counts, isolated, baseline),
                    "accelerator": ACCELERATORS[accelerator].name,
                    "modelled_on_accelerator": on_device and modelled_speedup(counts, on_device, baseline),
                }
            )
    return out
