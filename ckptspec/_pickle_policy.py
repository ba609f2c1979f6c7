"""What a pickle may name: the allow-list every global is judged by, and which entries an
operator's `pickle.allow` may add. The document models (which check a spec's entries) and the
readers (which judge every global) both import it; it imports neither."""

from __future__ import annotations

import re
from typing import Literal

from ._framework_records import ALLOWED_VALUES, RECORDS

__all__ = [
    "ALLOW_LIST",
    "EXTENSION_MODULE",
    "Safety",
    "classify_global",
    "exact_operator_globals",
    "only_error",
    "operator_allow_problem",
]

Safety = Literal["allowed", "framework-record", "dangerous"]
"""`framework-record`: a training framework's own record that no resume reads (see `_framework_records`)."""


EXTENSION_MODULE = "copyreg.extension"
"""Module name recorded for an EXT opcode whose code this process has not registered."""


_TORCH_BUILDERS = {
    ("torch._utils", name)
    for name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
                 "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_sparse_tensor",
                 "_rebuild_meta_tensor_no_storage", "_rebuild_nested_tensor", "_rebuild_wrapper_subclass",
                 "_rebuild_device_tensor_from_cpu_tensor", "_rebuild_device_tensor_from_numpy")
} | {("torch._tensor", "_rebuild_from_type_v2"), ("torch.serialization", "_get_layout")}  # fmt: skip
"""Rebuild a tensor from a storage (which comes from the archive by persistent id, never from bytes
in the pickle) or from another tensor or array, and a layout of integers: the functions torch's own
`weights_only` loader accepts. `_rebuild_from_type_v2` and `_rebuild_wrapper_subclass` call a class
the pickle names as a global of its own, so they are only as safe as it, and it is judged separately."""


_TORCH_VALUES = {
    ("torch", "Size"), ("torch", "device"), ("torch", "Tensor"), ("torch.nn.parameter", "Parameter"),
    ("torch.torch_version", "TorchVersion"),
    *(("torch", name) for name in (
        "float64", "float32", "float16", "bfloat16", "complex128", "complex64", "complex32", "int64", "int32",
        "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool", "float8_e4m3fn", "float8_e5m2",
        "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "qint8", "quint8", "qint32",
        "quint4x2", "quint2x4", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "float", "double", "half",
        "cfloat", "cdouble", "chalf", "short", "int", "long", "per_tensor_affine", "per_channel_affine",
        "per_tensor_symmetric", "per_channel_symmetric", "per_channel_affine_float_qparams",
        *(f"{kind}{bits}" for kind in ("int", "uint") for bits in range(1, 8)))),
    *((module, f"{kind}Storage") for module in ("torch", "torch.storage", "torch.cuda") for kind in (
        "Double", "Float", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool", "ComplexDouble",
        "ComplexFloat", "QInt8", "QUInt8", "QInt32", "QUInt4x2", "QUInt2x4", "Untyped")),
    *(("torch", f"{kind}Tensor") for kind in ("Double", "Float", "Half", "BFloat16", "Long", "Int", "Short", "Char",
                                              "Byte", "Bool", "ComplexDouble", "ComplexFloat")),
}  # fmt: skip
"""Constants and value types: `torch.float32`, `torch.Size((2, 3))`, `torch.device("cpu")`, storage
classes used as dtype tags in persistent ids, the legacy tensor types (`torch.FloatTensor`, which the
legacy tar layout records per tensor and torch's `weights_only` loader accepts), `torch.__version__`
(a `str` subclass). Building them takes plain values and runs nothing."""


_PYTHON_VALUES = {
    *(("builtins", name) for name in ("set", "frozenset", "bytearray", "complex", "slice", "int", "float", "str",
                                      "bytes", "bool", "tuple", "list", "dict", "range", "NotImplemented", "Ellipsis")),
    ("collections", "OrderedDict"), ("collections", "Counter"), ("collections", "defaultdict"),
    ("collections", "deque"), ("argparse", "Namespace"), ("typing", "Any"),
    ("_codecs", "encode"),
    *(("datetime", name) for name in ("datetime", "date", "time", "timedelta", "timezone")),
    *(("pathlib", name) for name in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")),
}  # fmt: skip
"""Containers and value types. `defaultdict` records its factory without calling it (the factory is a
global judged on its own); `Namespace` only sets attributes; `_codecs.encode` is how protocol 2
spells `bytes`, and its encodings are codecs of the standard library, never a module the file names.
Dates and paths (common in hyper-parameters) are values: building a path touches no file, and only
these concrete classes are listed, never a method reached through them (`pathlib.Path.touch`)."""


_NUMPY_VALUES = {
    ("numpy", "dtype"), ("numpy", "ndarray"),
    *((module, name) for module in ("numpy.core.multiarray", "numpy._core.multiarray") for name in ("_reconstruct", "scalar")),
    *((module, "_frombuffer") for module in ("numpy.core.numeric", "numpy._core.numeric")),
}  # fmt: skip
"""NumPy arrays, scalars and dtypes (RNG state, metrics): built from a dtype string, a shape and raw
bytes. Object arrays would hold further pickled objects, which are globals of their own."""


_CONFIG_CONTAINERS = {
    *((module, "AttributeDict") for module in (
        "pytorch_lightning.utilities.parsing", "lightning.pytorch.utilities.parsing",
        "lightning.fabric.utilities.data", "lightning_fabric.utilities.data")),
    ("omegaconf.dictconfig", "DictConfig"), ("omegaconf.listconfig", "ListConfig"),
    ("omegaconf.base", "ContainerMetadata"), ("omegaconf.base", "Metadata"),
    *(("omegaconf.nodes", name) for name in (
        "AnyNode", "StringNode", "IntegerNode", "FloatNode", "BooleanNode", "BytesNode")),
}  # fmt: skip
"""Hyper-parameter containers. Lightning's `AttributeDict` is a dict; OmegaConf containers and value
nodes are rebuilt by `object.__new__` and a `__setstate__` that stores the state dict as it is.
Interpolations and resolvers run only when a value is read, never while unpickling."""


_DEEPSPEED_VALUES = {
    ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"), ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
    ("deepspeed.runtime.zero.config", "ZeroStageEnum"), ("deepspeed.utils.tensor_fragment", "fragment_address"),
}  # fmt: skip
"""The records DeepSpeed's ZeRO optimizers put in every `*_optim_states.pt`: the loss scaler, the
stage (an `int` enum, looked up by value) and each parameter's `(numel, start)` fragment (a dataclass).
Their constructors only store the values given and none defines `__setstate__`: unpickling sets
attributes and nothing else."""


ALLOW_LIST: frozenset[tuple[str, str]] = frozenset(
    _TORCH_BUILDERS | _TORCH_VALUES | _PYTHON_VALUES | _NUMPY_VALUES | _CONFIG_CONTAINERS | _DEEPSPEED_VALUES | ALLOWED_VALUES
)
"""Every global a checkpoint may name without the operator's say-so: `(module, name)`, matched exactly."""


_GADGET_MODULES = (
    "os", "posix", "nt", "posixpath", "ntpath", "subprocess", "sys", "shutil", "socket", "runpy", "importlib",
    "imp", "zipimport", "pkgutil", "pickle", "_pickle", "pickletools", "marshal", "shelve", "dill", "cloudpickle",
    "joblib", "pty", "webbrowser", "code", "codeop", "ctypes", "_ctypes", "multiprocessing", "_posixsubprocess",
    "signal", "_thread", "threading", "asyncio", "pathlib", "io", "_io", "tempfile", "glob", "fileinput", "urllib",
    "http", "ftplib", "smtplib", "telnetlib", "requests", "platform", "operator", "functools", "types", "inspect",
    "gc", "timeit", "pdb", "bdb", "trace", "cProfile", "profile", "site", "sysconfig", "distutils", "setuptools",
    "pip", "ensurepip", "venv", "pydoc", "uuid", "doctest", "logging", "idlelib", "sqlite3", "_sqlite3",
    "copyreg", "_codecs", "codecs", "builtins", "__builtin__", "numpy.testing", "numpy.f2py", "numpy.distutils",
    "numpy.lib", "omegaconf._utils", "omegaconf.omegaconf", "torch.fx", "torch.utils", "torch._inductor",
    "torch._dynamo", "torch.hub", "torch.package", "torch.jit", "torch._C", "torch.ops", "torch.storage",
    "torch.serialization", "torch.distributed", "keras", "tensorflow", "tf_keras", "jax", EXTENSION_MODULE,
)  # fmt: skip
"""Modules known to hold globals that run code, touch files or import when a pickle calls them. The
verdict never depends on this list (anything off `ALLOW_LIST` is dangerous); it is what an operator's
`allow` entry may not name, and what a pattern would have to stay clear of."""


_INTERNAL_ATTRIBUTE = re.compile(r"(^|\.)__\w+__($|\.)")


_SCRIPT_CLASS = re.compile(r"__main__\.(?!__)[A-Za-z_]\w*")
"""A class the saving script defined itself (`torch.save(model)` run as a script): one plain name, no attribute chain."""


def classify_global(module: str, name: str) -> Safety:
    """Whether loading a pickle that names `module.name` runs only inert builders: on `ALLOW_LIST`,
    matched exactly, or dangerous. A protocol 4 dotted name (`_rebuild_tensor_v2.__globals__`) is the
    attribute chain it resolves to, judged whole, so it is never the builder it starts with."""
    if (module, name) in ALLOW_LIST:
        return "allowed"
    return "framework-record" if (module, name) in RECORDS else "dangerous"  # see _framework_records


def only_error(value: object) -> object:
    """`pickle.unknown_globals` as validated: `error`, the only value that names every trusted global."""
    if value != "error":
        raise ValueError(
            f"{value!r} would let globals nobody named pass; only 'error' is accepted: name each trusted global in `allow`"
        )
    return value


def exact_operator_globals(entries: list[str]) -> list[str]:
    """`pickle.allow` as validated: every entry names one global (see `operator_allow_problem`)."""
    problems = [problem for entry in entries if (problem := operator_allow_problem(entry)) is not None]
    if problems:
        raise ValueError("; ".join(problems))
    return entries


def operator_allow_problem(entry: str) -> str | None:
    """Why `entry` cannot be an operator's `pickle.allow` entry, or None when it names one global.

    Entries are exact `module.name` strings: a glob would admit globals nobody reviewed, and no entry
    may name a module known to hold code-running globals or reach into `__dunder__` attributes."""
    if any(character in entry for character in "*?[]"):
        return f"{entry!r} is a pattern; name each global exactly ('module.name'), a pattern admits globals nobody reviewed"
    if "." not in entry.strip(".") or entry != entry.strip() or ".." in entry:
        return f"{entry!r} is not a 'module.name' global"
    if _INTERNAL_ATTRIBUTE.search(entry) and not _SCRIPT_CLASS.fullmatch(entry):
        return f"{entry!r} reaches into an internal (__dunder__) attribute, a way to any code"
    for module in _GADGET_MODULES:
        if entry.startswith(module + "."):
            return f"{entry!r} is in {module}, which holds globals that run code when a pickle calls them"
    return None
