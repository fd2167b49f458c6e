#!/usr/bin/env python
"""Measure a pair's draft, and the drafts of other pairs over the same target, on held-out prompts
of every task family (see mtad/distill/draft_measurement.py).

    python scripts/measure_draft.py --pair smollm2_135m_head --compare smollm2_135m --per-family 10
Writes the measurement section of results/draft/draft.json and measure.md; when writing the committed
results/draft, also the results page that quotes it (results/README.md) and every shipped draft's model
card's "Measured" section (`card.refresh_measured`: the measured drafts' figures; any other card says it is
not measured).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]


def draft_file_meta(cfg: dict) -> tuple[str | None, dict]:
    """The draft file of a pair config (relative to the checkout) and its metadata, head ids left out."""
    from mtad.models.draft import read_draft_meta
    from mtad.models.head import read_head_meta
    from mtad.models.pairs import ASSETS_DIR

    spec = cfg["draft"]
    if not spec.get("file"):
        return None, {"source": spec["source"]}
    path = Path(spec["file"]) if Path(spec["file"]).is_absolute() else ASSETS_DIR / spec["file"]
    meta = (read_head_meta if spec["source"] == "head" else read_draft_meta)(path)
    ids = meta.pop("head_token_ids", None)
    meta.pop("train_config", None)
    return os.path.relpath(path.resolve(), ROOT), meta | {
        "source": spec["source"],
        "head_size": len(ids) if ids else None,
    }


def write_outputs(result: dict, out: Path) -> None:
    """The measurement section of draft.json and measure.md in `out`; for the committed results/draft also
    the results page (`results/README.md`) and each measured draft's model card (their Measured sections)."""
    from results_readme import page  # the results page quotes this measurement

    from mtad.distill.card import refresh_measured
    from mtad.distill.draft_measurement import markdown, write_measurement
    from mtad.models.pairs import ASSETS_DIR

    described = "; ".join(
        f"`{name}`: {r['kind']} draft `{r['file']}` "
        f"({r['meta'].get('trained_tokens', '?')} training tokens, {r['dtype']})"
        for name, r in result["drafts"].items()
    )
    header = [
        f"# Draft measurement: {result['pair']}",
        "",
        f"Drafts of one target, measured side by side on the same prompts and seeds: {described}. Held-out "
        f"requests per kind: {result['per_family']} (subjects never used in training), at most "
        f"{result['max_new_tokens']} new tokens, seed {result['seed']}. Machine: {result['environment']['machine']}, "
        f"decode path {result['decode_path']}, torch threads {result['threads']}, target {result['target_dtype']}; "
        f"load average at the end {result['load_average_1_5_15min_at_end']}.",
    ]
    write_measurement(out, result)
    (out / "measure.md").write_text(markdown(result, header))
    if out.resolve() == (ROOT / "results" / "draft").resolve():
        (ROOT / "results" / "README.md").write_text(page(ROOT / "results"))
        files = {(ROOT / r["file"]).resolve(): r["kind"] for r in result["drafts"].values() if r.get("file")}
        for card in sorted((ASSETS_DIR / "drafts").glob("*.md")):  # every shipped draft's card: measured, or saying not
            draft_file = card.with_suffix(".safetensors")
            if draft_file.exists():
                refresh_measured(card, out, files.get(draft_file.resolve()))


def parser() -> argparse.ArgumentParser:
    """The command line, each option with its one default (`measure` takes every setting from it)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="smollm2_135m_head")
    ap.add_argument(
        "--compare",
        default="",
        help="comma-separated pairs whose drafts are measured beside, on this pair's target (they must share it)",
    )
    ap.add_argument("--draft-file", default=None, help="measure this draft file instead of the pair's")
    ap.add_argument("--per-family", type=int, default=10, help="held-out requests per kind")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("MTAD_THREADS", "1")))
    ap.add_argument("--out", default=str(ROOT / "results" / "draft"))
    ap.add_argument(
        "--render", default=None, help="only render the measurement stored in this folder's draft.json into --out"
    )
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)  # before the imports below, which load torch: --help stays fast
    from mtad import provenance
    from mtad.devices import set_threads
    from mtad.distill.draft_measurement import measure, read_measurement
    from mtad.models.pairs import load_draft_model, load_pair, pair_config
    from mtad.provenance import environment_record

    provenance.capture()  # the code this run starts from, whatever the checkout becomes while it runs
    if args.render:
        stored = read_measurement(Path(args.render))
        if stored is None:
            raise SystemExit(
                f"--render {args.render}: no measurement in its draft.json (make measure-draft writes one)"
            )
        write_outputs(stored, Path(args.out))
        print((Path(args.out) / "measure.md").read_text())
        return 0
    set_threads(args.threads)

    pair = load_pair(args.pair, draft_file=args.draft_file, device="cpu")
    configs = {pair.name: pair.config} | {name: pair_config(name) for name in filter(None, args.compare.split(","))}
    for name, cfg in configs.items():
        if cfg["target"] != pair.config["target"]:
            raise ValueError(
                f"--compare {name}: its target {cfg['target']} is not {args.pair}'s {pair.config['target']}"
            )
    drafts = {pair.name: pair.draft} | {
        name: load_draft_model(cfg, pair.target)[0].requires_grad_(False)
        for name, cfg in configs.items()
        if name != pair.name
    }
    t0 = time.time()
    result = measure(
        pair.target, pair.tokenizer, drafts, pair.decode_path, args.per_family, args.max_new_tokens, args.seed
    )
    for name, cfg in configs.items():
        result["drafts"][name]["file"], result["drafts"][name]["meta"] = draft_file_meta(cfg)
        result["drafts"][name]["dtype"] = provenance.dtype_name(drafts[name])
    result |= {
        "pair": pair.name,
        "environment": environment_record([pair.target, *drafts.values()]),
        "threads": args.threads,
        "target_dtype": provenance.dtype_name(pair.target),
        "wall_seconds": round(time.time() - t0, 1),
        "load_average_1_5_15min_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    write_outputs(result, Path(args.out))
    print((Path(args.out) / "measure.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
