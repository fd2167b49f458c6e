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

from mtad.bench.rows import find_row
from mtad.decoding.registry import REFERENCE
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
    return [(g["rep"], g["prompt"], GenerationCost.of(row["method"], g)) for g in row.get("generations") or []]


HOST_TERMS = ("measured", "fitted", "shared")  # a block profile's per method; fitted per method; one for all


def held_out_speeds(rows: list[dict], host_ms: dict | None = None) -> dict[str, dict]:
    """Per host term (`HOST_TERMS`): label -> (measured, predicted) tokens/s over every timed
    generation of the row: its tokens over the sum of its measured seconds, and over the sum of its
    predicted ones. Each generation is predicted by a profile fitted to the same repetition's
    generations of the other prompts: the configs alternate within a repetition, so its profile is
    the machine of that stretch of time (a shared VM drifts by tens of percent between repetitions).
    The host term per target call: "measured", each method's from a block profile of this machine
    (`host_ms`, nothing of it fitted to these rows); "fitted", each method's own from the other
    prompts; "shared", one for every method (a baseline). A term is empty when the run has one
    prompt, and "measured" when `host_ms` lacks a method of the rows."""
    costs = {r["label"]: generation_costs(r) for r in rows}
    every = [c for cs in costs.values() for c in cs]
    if len({prompt for _, prompt, _ in every}) < 2:
        return {host: {} for host in HOST_TERMS}
    folds = {(rep, prompt) for rep, prompt, _ in every}
    fits = {(rep, p): fit_profile([c for r, q, c in every if r == rep and q != p]) for rep, p in folds}
    measured_host = bool(host_ms) and all(c.method in host_ms for _, _, c in every)

    def speeds(host: str) -> dict:
        if host == "measured" and not measured_host:
            return {}

        def profile(rep: int, prompt: int, method: str):
            fit = fits[rep, prompt]
            given = {"measured": (host_ms or {}).get(method), "shared": fit.shared_host_ms, "fitted": None}[host]
            return fit.profile(method, host_ms=given)

        found = {}
        for label, cs in costs.items():
            if cs:
                tokens = sum(c.counts.new_tokens for _, _, c in cs)
                measured = sum(c.seconds for _, _, c in cs)
                predicted = sum(modelled_seconds(c.counts, profile(rep, p, c.method)) for rep, p, c in cs)
                found[label] = (tokens / measured, tokens / predicted)
        return found

    return {host: speeds(host) for host in HOST_TERMS}


def attach_host_profile(payload: dict, profile: dict | None) -> dict:
    """The payload with `host_ms` (path -> method -> host work per target call) from the block profile
    `profile` (`make profile`'s payload) where it was made on the payload's machine at its thread count;
    else as it was (the cost model's host term is then fitted)."""
    from mtad.bench.block_profile import host_ms_per_call

    env = payload["environment"]
    if "host_ms" not in payload and profile is not None:
        host = host_ms_per_call(profile, env["machine"], env["threads"])
        if host:
            payload["host_ms"] = {profile["setup"].get("decode_path", "fast"): host}
    return payload


def within(modelled: float | None, measured: float | None) -> bool | None:
    """Whether a modelled speed-up is within ``AGREEMENT`` of the measured one (None: one is missing)."""
    return None if None in (modelled, measured) else abs(modelled / measured - 1) <= AGREEMENT


def isolated_profile(payload: dict, path: str) -> DeviceProfile | None:
    """This machine from the run's isolated forwards (its cost curve at the run's thread count), host
    work per call as sampling's time outside the forwards. None when the run has no such curve."""
    env = payload["environment"]
    sampling = find_row(payload["rows"], REFERENCE, path)
    if not payload.get("curve") or sampling is None:
        return None
    curves = [c for c in payload["curve"]["curves"] if c["path"] != "fast" or c.get("threads") == env.get("threads")]
    try:
        dtype = env["target_dtype"]
        profile = from_bench({**payload, "curve": {**payload["curve"], "curves": curves}}, dtype, path)
    except KeyError:
        return None
    host = sampling["other_frac"] * sampling["ms_per_token"]
    return DeviceProfile(profile.name, profile.target_ms, profile.draft_ms, host, profile.sources)


def modelled_rows(payload: dict, accelerator: str = DEFAULT_ACCELERATOR) -> list[dict]:
    """Per method and path with counts: measured speed-ups over sampling (the row's, its range over
    repetitions, and over all its timed generations pooled), the held-out modelled one of the same
    generations under each host term (`HOST_TERMS`; "measured" where the payload holds `host_ms`, a
    block profile's host work per call on this machine, `attach_host_profile`) and whether the
    model's (the measured host term where there is one, else the fitted) agrees with the pooled
    measurement within ``AGREEMENT``, beside the baselines it must beat (a constant speed-up of 1,
    one host term for all methods), the isolated forwards' modelled speed-up, and the accelerator's."""
    pair = payload["setup"]["pair"]
    on_device = accelerator_profile(pair, accelerator) if pair in PAIR_SIZES else None
    out = []
    for path in ("eager", "fast"):
        rows = [r for r in payload["rows"] if r["impl"] == "ours" and r["path"] == path and not r.get("target_dtype")]
        base = next((r for r in rows if r["method"] == REFERENCE and r.get("counts")), None)
        if base is None:
            continue
        host_ms = (payload.get("host_ms") or {}).get(path)  # a block profile times one path
        speeds = held_out_speeds(rows, host_ms)  # the folds fitted once for every host term
        model = "measured" if speeds["measured"] else "fitted"
        isolated = isolated_profile(payload, path)
        baseline = Counts.of(base["counts"])
        for r in rows:
            if r["method"] == REFERENCE or not r.get("counts"):
                continue
            counts = Counts.of(r["counts"])
            measured = r.get("speedup_vs_sampling")
            # the ratio repetition by repetition (beside sampling in the same minute): its spread is the
            # measurement's resolution
            paired = [m / s for m, s in zip(r.get("tokens_per_s_reps") or [], base.get("tokens_per_s_reps") or [])]
            pooled, by_host = None, {}
            for host, found in speeds.items():
                if r["label"] in found and base["label"] in found:
                    (mine, predicted), (sampling, sampling_predicted) = found[r["label"]], found[base["label"]]
                    pooled, by_host[host] = mine / sampling, predicted / sampling_predicted
            modelled = by_host.get(model)
            out.append(
                {
                    "label": r["label"],
                    "method": r["method"],
                    "path": path,
                    "measured": measured,
                    "measured_range": (min(paired), max(paired)) if paired else None,
                    "measured_pooled": pooled,
                    "modelled": modelled,
                    "host_term": model,
                    "agrees": within(modelled, pooled),
                    "modelled_by_host": by_host,
                    # the baselines: a speed-up of 1 whatever the counts; one host term for every method
                    "baselines_agree": {
                        "constant 1.0": within(1.0, pooled),
                        "shared host": within(by_host.get("shared"), pooled),
                    },
                    "modelled_isolated": isolated and modelled_speedup(counts, isolated, baseline),
                    "accelerator": ACCELERATORS[accelerator].name,
                    "modelled_on_accelerator": on_device and modelled_speedup(counts, on_device, baseline),
                }
            )
    return out
