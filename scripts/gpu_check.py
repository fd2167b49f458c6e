"""`make gpu-check`: the GPU paths in one run of at most 8 minutes on one GPU, on tiny random-weight
models built from configs, nothing downloaded (mtad/bench/gpu_check/): exactness on the device
against the CPU, every method on every decode path, NVML energy, the target cost curve and copy
bandwidth, the embedded pair when its files are here -> gpu_check.json and gpu_check.md under --out.
Without a CUDA device it is a dry run (every check listed, skipped with the reason; exit 0).

    python scripts/gpu_check.py [--out results/local/gpu_check] [--quick] [--checks exactness,energy]
    python scripts/gpu_check.py --device cpu --quick   # the checks' code on the CPU (not a GPU's numbers)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def load_module():
    """mtad.bench.gpu_check; by its folder when the package cannot be imported (a python without torch:
    the gpu_check package alone needs only the standard library, enough for the dry run)."""
    try:
        from mtad.bench import gpu_check

        return gpu_check
    except ImportError:
        folder = ROOT / "mtad" / "bench" / "gpu_check"
        spec = importlib.util.spec_from_file_location(
            "mtad_gpu_check", folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module


def main(argv: list[str] | None = None) -> int:
    """Parse the options, record the code state, run the chosen checks; the exit code says how they went."""
    gpu_check = load_module()
    ap = parser(gpu_check)
    args = ap.parse_args(argv)
    from mtad import provenance

    provenance.capture()  # the code this run starts from, whatever the checkout becomes while it runs
    try:
        asked = options(args, gpu_check)
    except ValueError as err:
        ap.error(str(err))
    payload = gpu_check.run(asked, args.out)
    return gpu_check.exit_code(payload)


def parser(gpu_check) -> argparse.ArgumentParser:
    """The command line; each option's default is the field's of `gpu_check.Options` (the one default)."""
    asked = gpu_check.Options
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=gpu_check.DEFAULT_OUT, help="folder of gpu_check.json and gpu_check.md")
    ap.add_argument(
        "--device",
        default=asked.device,
        help="auto (CUDA if there is one, else a dry run) | cuda | cuda:N | cpu (the checks' code on the CPU)",
    )
    ap.add_argument("--checks", default=",".join(asked.checks), help="comma-separated, in this order")
    ap.add_argument(
        "--paths", default=asked.paths, help="decode paths of decode_paths (default: all; on a CPU all but compiled)"
    )
    ap.add_argument(
        "--quick", action="store_true", default=asked.quick, help="fewer tokens, seeds, draws and repetitions"
    )
    ap.add_argument("--max-minutes", type=float, default=asked.max_minutes, help="time budget of all checks")
    ap.add_argument("--curve-model", choices=sorted(gpu_check.CURVE_MODELS), default=asked.curve_model)
    ap.add_argument("--embedded-pair", default=asked.embedded_pair)
    return ap


def options(args: argparse.Namespace, gpu_check):
    """The `gpu_check.Options` the parsed command line asks for (a ValueError names what is unknown)."""
    return gpu_check.Options(
        device=args.device,
        checks=tuple(c for c in args.checks.split(",") if c),
        quick=args.quick,
        paths=tuple(p for p in args.paths.split(",") if p) if args.paths is not None else None,
        max_minutes=args.max_minutes,
        curve_model=args.curve_model,
        embedded_pair=args.embedded_pair,
    )


if __name__ == "__main__":
    sys.exit(main())
