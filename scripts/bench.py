"""`make bench`: every method on the eager and fast decode paths, HF generate() (eager, and
static cache + compile) and assisted generation; compile times; sampling with the q4_1 target
(the GGUF's own 4-bit weights) beside them; the verification-cost curve per dtype (float32,
bfloat16, q4_1, int8 and their bf16 variants), path and thread count, each forward of 1, 5, 9,
17 tokens beside its matrix products alone (and int8 per-row products, a kernel measured), and
the calibration read from it
(dtype, threads, the tree methods' node budget); adaptive drafting and SpecInfer/MMTAD at that node
budget beside their fixed selves; our fast-path rows again on long (CNN/DailyMail) prompts at one
thread; llama.cpp on the same GGUF when llama-cpp-python is importable (an optional install); the
goals table -> bench.md, and the `timings` section of bench.json, under --out.

    python scripts/bench.py [--pair smollm2_135m_head] [--prompts 2] [--max-new-tokens 48] [--reps 3]
    python scripts/bench.py --q4-tv 20 --max-new-tokens 32   # only the reduced targets' TV from float32
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from mtad import provenance
from mtad.bench import rendered, write_report
from mtad.bench.curves import BENCH_THREADS
from mtad.bench.render import read_timings
from mtad.bench.timings import CURVE_DTYPES, SAMPLING_TARGETS
from mtad.decoding import SpSParams
from mtad.devices import torch_threads
from mtad.experiments.bench_cells import measure_pair
from mtad.result_files import BENCH


def main(argv=None) -> None:
    """Parse the options, record the code state, then rebuild a stored report, measure the reduced
    targets' distance, or run the whole bench."""
    args = parser().parse_args(argv)
    provenance.capture()  # the code this run starts from, whatever the checkout becomes while it runs
    if args.render:
        render(args)
    elif args.q4_tv:
        reduced_targets_tv(args)
    else:
        bench(args)


def parser() -> argparse.ArgumentParser:
    """The command line, each option with its one default."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(ap)
    add_curve_options(ap)
    add_output_options(ap)
    return ap


def add_run_options(ap: argparse.ArgumentParser) -> None:
    """The pair, its prompts and generations, the thread count, the dtypes and the rows run."""
    ap.add_argument("--pair", default="smollm2_135m_head")
    experiment = "(default: conf/experiment/bench.yaml's)"
    ap.add_argument("--prompts", type=int, help=f"held-out chat prompts {experiment}")
    ap.add_argument("--max-new-tokens", type=int, help=f"of every generation, short and long {experiment}")
    ap.add_argument("--reps", type=int, help=f"repetitions of every row: its cells' samples per prompt {experiment}")
    ap.add_argument("--gamma", type=int, default=SpSParams().gamma, help="draft length of every chain method")
    ap.add_argument("--threads", type=int, default=BENCH_THREADS, help="torch threads (0: torch's default)")
    ap.add_argument("--target-dtype", default=None, help="override the pair's target dtype")
    ap.add_argument("--draft-dtype", default=None)
    ap.add_argument(
        "--only", default=None, help="comma-separated substrings of config labels to run (llama.cpp: the reference)"
    )
    ap.add_argument(
        "--compiled",
        action="store_true",
        help="add our compiled path for sampling and sps (about 2 min of compilation per shape on a 2-core CPU)",
    )


def add_curve_options(ap: argparse.ArgumentParser) -> None:
    """The verification-cost curve, the other targets sampled with, and the llama.cpp reference."""
    ap.add_argument(
        "--curve-dtypes",
        default=",".join(CURVE_DTYPES),
        help="target dtypes of the verification-cost curve, each forward beside its matrix products ('' = skip)",
    )
    ap.add_argument(
        "--curve-reps",
        type=int,
        default=10,
        help="repetitions (median) of each forward and products time in the curve; q4_1 forwards are slow "
        "on x86 (float32 runs the int4 kernel's generic loop), so fewer save minutes",
    )
    ap.add_argument(
        "--sampling-targets",
        default=",".join(SAMPLING_TARGETS),
        help="other target dtypes to run sampling with on the fast path, a row each ('' = none)",
    )
    ap.add_argument(
        "--no-llama-cpp",
        action="store_true",
        help="skip the llama.cpp reference (run only when llama-cpp-python is importable, on a GGUF target)",
    )


def add_output_options(ap: argparse.ArgumentParser) -> None:
    """The other modes (reduced targets' distance, rendering), the output folder, the long prompts and notes."""
    ap.add_argument(
        "--q4-tv",
        type=int,
        default=0,
        metavar="PROMPTS",
        help="only measure the reduced targets' (q4_1, int8, bf16) distance from the float32 one on this many "
        "held-out prompts "
        "(--max-new-tokens each; writes the `target_distance` section of bench.json and q4_tv.md under --out)",
    )
    ap.add_argument(
        "--render",
        metavar="FOLDER",
        type=Path,
        help="measure nothing: rebuild the report (bench.md, and the timings' calibration) under --out from the "
        "timings stored in FOLDER's bench.json",
    )
    ap.add_argument("--out", default="results/bench")
    ap.add_argument(
        "--results-root",
        default="results/local/runs",
        help="where the timed generations' cells go (<root>/bench/<pair>/...); a rerun resumes them, so delete "
        "<root>/bench to time anew",
    )
    ap.add_argument(
        "--long-prompts",
        type=int,
        help="CNN/DailyMail articles (400-1,000-token prompts) our fast-path rows run on again at one thread "
        "(0: none; default: conf/experiment/bench.yaml's)",
    )
    ap.add_argument("--note", action="append", default=[], help="a line for the Notes section")


def render(args: argparse.Namespace) -> None:
    """`--render`: the report rebuilt under `--out` from the timings stored in `--render`, and printed."""
    stored = read_timings(args.render)
    if stored is None:
        raise SystemExit(f"{BENCH.path(args.render)}: no timings stored (make bench writes them)")
    write_report(Path(args.out), rendered(stored))
    print((Path(args.out) / "bench.md").read_text())


def reduced_targets_tv(args: argparse.Namespace) -> None:
    """`--q4-tv`: each reduced target's distance from the float32 one on `--q4-tv` held-out prompts."""
    from mtad.bench.target_distance import q4_tv, write_q4_tv

    if args.max_new_tokens is None:
        raise SystemExit("--q4-tv needs --max-new-tokens: each prompt's float32 continuation is that long")
    with torch_threads(args.threads):
        print(write_q4_tv(q4_tv(args.pair, args.q4_tv, args.max_new_tokens), args.out))


def measure_settings(args: argparse.Namespace) -> dict:
    """`measure_pair`'s settings from the options: every one given, so each default lives here alone."""
    return {
        "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens,
        "reps": args.reps,
        "gamma": args.gamma,
        "threads": args.threads,
        "target_dtype": args.target_dtype,
        "draft_dtype": args.draft_dtype,
        "only": args.only,
        "compiled": args.compiled,
        "curve_dtypes": tuple(filter(None, args.curve_dtypes.split(","))),
        "curve_reps": args.curve_reps,
        "sampling_targets": tuple(filter(None, args.sampling_targets.split(","))),
        "llama_cpp": not args.no_llama_cpp,
        "long_prompts": args.long_prompts,
        "notes": args.note,
        "results_root": args.results_root,
    }


def bench(args: argparse.Namespace) -> None:
    """The whole bench of `--pair` (`measure_pair`), its report written under `--out` and printed."""
    # the bench runs on a quiet machine: the bf16 product kernels are timed anew there, and the
    # choice replaces one a busier moment stored (mtad/decoding/kernels.py); MTAD_KERNELS overrides
    os.environ.setdefault("MTAD_KERNELS", "calibrate")
    payload = measure_pair(args.pair, **measure_settings(args))
    write_report(Path(args.out), payload)
    print((Path(args.out) / "bench.md").read_text())


if __name__ == "__main__":
    main()
