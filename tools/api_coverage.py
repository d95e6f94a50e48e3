"""How much of PyTorch's public API corenn has: per namespace, what it has, what it lacks, what is excluded and why.

Needs an installed ``torch`` (the test-only 2.13.0 CPU wheel: ``pip install torch==2.13.0``);
corenn never imports it, this tool does. Names are compared by spelling only: a name counts
as present when corenn has an attribute of that name in the matching namespace (with every
installed first-party plugin loaded, since plugins provide some of PyTorch's names). Whether
it behaves like PyTorch's is what the test suite's oracle tests check, not this tool.

Excluded, each with its reason, and not counted against corenn: private names, sparse
layouts, quantized tensors and modules (corenn-quantize's), named tensors, PyTorch-internal
helpers and backends (cuDNN, MKLDNN, MIOpen, fbgemm, ...), deprecated aliases, typing
helpers re-exported by a module, and submodules.

    python tools/api_coverage.py                 # the summary table
    python tools/api_coverage.py --missing nn    # the names corenn lacks in one namespace
    python tools/api_coverage.py --json          # everything, for other tools
"""
from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import types

# (reason, pattern on the name[, only in these namespaces]): the first that matches excludes a name.
EXCLUSIONS = [
    ("deprecated aliases", re.compile(r"^(uniform|normal|constant|xavier_uniform|xavier_normal|kaiming_uniform|"
                                      r"kaiming_normal|orthogonal|eye|dirac)$"), {"nn.init"}),
    ("deprecated (the parametrizations of corenn-parametrize replace them)",
     re.compile(r"^(remove_)?(spectral_norm|weight_norm)$"), {"nn.utils"}),
    ("deprecated (DataPipes moved out of PyTorch)",
     re.compile(r"DataPipe|^DataChunk$|^argument_validation$|^runtime_validation|^non_deterministic$|"
                r"^guaranteed_datapipes_determinism$"), {"utils.data"}),
    ("sparse layouts", re.compile(r"sparse|^to_dense$|^coalesce$|^is_coalesced$|^indices$|^values$|^crow_|^col_|"
                                  r"^ccol_|^row_indices$|^smm$|^sspaddmm$|^hspmm$|_csr|_csc|_bsr|_bsc|^dense_dim$|"
                                  r"^(indices|values|row_indices)_copy$|"  # the *_copy forms of sparse accessors
                                  r"^SparseAdam$")),  # optim.SparseAdam takes sparse gradients only (dense: error)
    ("quantized (corenn-quantize)", re.compile(r"quantiz|^q_|^int_repr$|^qscheme$|^per_channel|^per_tensor|"
                                               r"^quint|^qint|^fake_quant|^dequantize$|^fbgemm|^Q[A-Z]")),
    ("named tensors", re.compile(r"^names$|^refine_names$|^align_to$|^align_as$|^rename_?$|^has_names$|^unflatten_dense")),
    ("PyTorch-internal backends and helpers", re.compile(
        r"^(mkldnn|miopen|cudnn|_|nnpack|xnnpack|vulkan|mps_|native_|batch_norm_(backward|elemt|gather|stats|update)|"
        r"fused_|cufft|segment_reduce|slow_conv|thnn|conv_tbc|conv_depthwise|cpp|is_vulkan|is_mkldnn|is_ipu|"
        r"is_xla|is_maia|is_mtia|is_hpu|is_ort|is_nested|nested|functional_|sym_|export|compiler|library|"
        r"overrides|hub|onnx|package|profiler|testing|utils|jit|fx|distributions|futures|monitor|"
        r"masked|special|signal|xpu|mtia|cuda|cpu|mps|backends|func|autograd|amp|accelerator|return_types|"
        r"storage|untyped|typename|set_flush_denormal|classes|ops|opt_einsum|overload|types|version|"
        r"torch_version|random|serialization|multiprocessing|distributed|hip)")),
    ("deprecated aliases", re.compile(r"^(chain_matmul|lstsq|solve|symeig|eig|matrix_rank|qr|lu_solve|"
                                      r"set_default_tensor_type|is_tensor_like|Container|upsample|upsample_bilinear|"
                                      r"upsample_nearest)$")),
]
# Names a module re-exports from typing or its own imports: not part of its API.
TYPING_HELPERS = {"Any", "Callable", "List", "Optional", "Tuple", "Union", "Dict", "Sequence", "TypeVar", "Tensor",
                  "DType", "BroadcastingList1", "BroadcastingList2", "BroadcastingList3", "boolean_dispatch",
                  "handle_torch_function", "has_torch_function", "has_torch_function_unary",
                  "has_torch_function_variadic", "annotations", "math", "warnings", "importlib", "np", "torch",
                  "Module", "Parameter", "Iterable", "Iterator", "TYPE_CHECKING", "Generic", "cast", "overload",
                  "deprecated", "grad", "GRID_SAMPLE_INTERPOLATION_MODES", "GRID_SAMPLE_PADDING_MODES", "Size",
                  "Number", "Float", "Integer", "Literal", "TensorOrTensors", "Buffer", "NamedTuple", "defaultdict",
                  "ParamsT", "Required", "StateDict", "Kwargs", "Args", "ParamSpec", "SupportsFloat", "partial",
                  "ref", "wraps"}


def namespaces(torch, corenn) -> dict:
    """Namespace label -> (PyTorch's object, corenn's object, which names count).

    'classes' (``torch.nn``, the optimizers), 'functions' (``torch``'s functions: its classes are
    mostly TorchScript and C++ internals), 'callables' or 'all'.
    """
    import corenn.nn
    import corenn.nn.functional
    import corenn.nn.init
    import corenn.nn.utils
    import corenn.optim
    import corenn.optim.lr_scheduler
    import corenn.utils.data
    import corenn.fx
    import torch.distributions
    import torch.fft
    import torch.fx
    import torch.linalg
    import torch.special
    import torch.nn.functional
    import torch.nn.init
    import torch.nn.utils
    import torch.optim.lr_scheduler
    import torch.utils.data
    return {
        "torch": (torch, corenn, "functions"),
        "Tensor": (torch.Tensor, corenn.Tensor, "all"),
        "nn": (torch.nn, corenn.nn, "classes"),
        "nn.functional": (torch.nn.functional, corenn.nn.functional, "callables"),
        "nn.init": (torch.nn.init, corenn.nn.init, "callables"),
        "nn.utils": (torch.nn.utils, corenn.nn.utils, "all"),
        "optim": (torch.optim, corenn.optim, "classes"),
        "optim.lr_scheduler": (torch.optim.lr_scheduler, corenn.optim.lr_scheduler, "classes"),
        "utils.data": (torch.utils.data, corenn.utils.data, "all"),
        "fx": (torch.fx, corenn.fx, "all"),
        # Namespaces corenn may lack entirely: then every name counts as missing.
        "linalg": (torch.linalg, _optional(corenn, "linalg"), "callables"),
        "special": (torch.special, _optional(corenn, "special"), "callables"),
        "fft": (torch.fft, _optional(corenn, "fft"), "callables"),
        "distributions": (torch.distributions, _optional(corenn, "distributions"), "classes"),
    }


def _optional(corenn, name):
    try:
        return getattr(corenn, name)
    except (AttributeError, ImportError):
        return None


def candidate_names(obj, kind: str) -> list[str]:
    names = []
    for name in dir(obj):
        if name.startswith("_") or name in TYPING_HELPERS:
            continue
        try:
            value = inspect.getattr_static(obj, name)
        except AttributeError:
            continue
        if isinstance(value, types.ModuleType):
            continue
        if kind == "classes" and not inspect.isclass(value):
            continue
        if kind == "callables" and not callable(getattr(obj, name, None)):
            continue
        if kind == "functions" and not inspect.isroutine(getattr(obj, name, None)):
            continue
        names.append(name)
    return sorted(names)


def exclusion(name: str, namespace: str) -> str | None:
    for reason, pattern, *only in EXCLUSIONS:
        if only and namespace not in only[0]:
            continue
        if pattern.search(name):
            return reason
    return None


def has(obj, name: str) -> bool:
    if obj is None:  # a namespace corenn does not have
        return False
    try:
        getattr(obj, name)
    except Exception:  # noqa: BLE001  a plugin's lazy name may fail to import: then corenn lacks it
        return False
    return True


def report(torch, corenn) -> dict:
    result = {}
    for label, (theirs, ours, kind) in namespaces(torch, corenn).items():
        present, missing, excluded = [], [], {}
        for name in candidate_names(theirs, kind):
            reason = exclusion(name, label)
            if reason is not None and not has(ours, name):
                excluded.setdefault(reason, []).append(name)
            elif has(ours, name):
                present.append(name)
            else:
                missing.append(name)
        counted = len(present) + len(missing)
        result[label] = {"present": present, "missing": missing, "excluded": excluded,
                         "coverage": len(present) / counted if counted else 1.0}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--missing", metavar="NAMESPACE", help="list the names corenn lacks in NAMESPACE")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    arguments = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("api_coverage: needs torch (pip install torch==2.13.0), the reference it compares with",
              file=sys.stderr)
        return 2
    import corenn
    result = report(torch, corenn)
    if arguments.json:
        print(json.dumps(result, indent=1))
        return 0
    if arguments.missing:
        if arguments.missing not in result:
            print(f"api_coverage: no namespace {arguments.missing!r}; one of {', '.join(result)}", file=sys.stderr)
            return 2
        print("\n".join(result[arguments.missing]["missing"]))
        return 0
    print(f"corenn {corenn.__version__} against torch {torch.__version__}: names corenn has, by namespace")
    print(f"{'namespace':<20} {'has':>5} {'lacks':>6} {'coverage':>9}   excluded (not counted)")
    for label, entry in result.items():
        excluded = ", ".join(f"{reason} {len(names)}" for reason, names in entry["excluded"].items()) or "-"
        print(f"{label:<20} {len(entry['present']):>5} {len(entry['missing']):>6} {entry['coverage']:>8.0%}   {excluded}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
