"""Plain data across the seal: what the sealed attack process sends back is data, never code.

The sealed side turns a result into a tree of primitives (:func:`flatten`): numbers, strings, bytes and
tuples/lists of them, each value tagged with its kind (a tensor is its dtype, shape, device and bytes).
The pipeline reads that tree with a budget (:mod:`decpriv.seal.primitives`: opcodes for primitives only, so no
class or function is ever looked up and reading runs no code; the tree as it will be walked, shared parts
counted at each use, bounded in parts, depth and bytes), then builds from it only plain
data (:func:`build`): numbers, strings, containers, numpy arrays, torch tensors of the base class (on the
device they came from), pandas frames, series and indexes, and decpriv's own declared result types (its
dataclasses, named tuples and enums, built through their constructors). A tensor subclass, a list
subclass, a user's own class or a hand-made stream that names anything else is refused, naming it.
"""

import dataclasses
import enum
import importlib
import io
import pickle
import sys
from typing import Any

import numpy as np
import pandas as pd
import torch

from decpriv.seal.primitives import DEFAULT_BYTES, NotPlain, read_tree

PRIMITIVE = (type(None), bool, int, float, str, bytes)
CONTAINERS = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}


def type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def dumps(value: Any) -> bytes:
    """The sealed side: ``value`` as pickled primitives (raises :class:`NotPlain`)."""
    return pickle.dumps(flatten(value), pickle.HIGHEST_PROTOCOL)


def load(stream: io.BufferedIOBase, limit: int = DEFAULT_BYTES) -> Any:
    """The pipeline's side: the next message on ``stream``, at most ``limit`` bytes, built as plain data
    (raises :class:`NotPlain`, its :class:`~decpriv.seal.primitives.TooLarge` past the limit, EOFError when the stream ends before the
    message does)."""
    tree = read_tree(stream, limit)
    try:
        return build(tree)
    except NotPlain:
        raise
    except Exception as error:  # a malformed tree: a tag with the wrong fields
        raise NotPlain(f"a malformed value ({type(error).__name__}: {error})") from None


def flatten(value: Any) -> Any:
    """``value`` as a tree of primitives: a primitive stays itself, anything else becomes a tuple
    ``(tag, ...)``."""
    kind = type(value)
    if kind in PRIMITIVE:
        return value
    if kind in CONTAINERS:
        return (CONTAINERS[kind], [flatten(item) for item in value])
    if kind is dict:
        return ("dict", [(flatten(k), flatten(v)) for k, v in value.items()])
    if kind is complex:
        return ("complex", value.real, value.imag)
    if value is pd.NA:  # a nullable pandas column's missing value
        return ("na",)
    if isinstance(value, torch.Tensor):
        return _flat_tensor(value)
    if kind is np.ndarray:
        return _flat_array(value)
    if isinstance(value, np.generic) and kind.__module__ == "numpy":
        return ("scalar", _flat_array(np.asarray(value)))
    if kind in (pd.DataFrame, pd.Series) or isinstance(value, pd.Index):
        return _flat_pandas(value)
    if _declared(kind):
        return _flat_record(value)
    raise NotPlain(type_name(value))


def _flat_tensor(tensor: torch.Tensor) -> tuple:
    """A tensor as its dtype, shape, device and bytes (a subclass, a Parameter included, as its base)."""
    base = torch.Tensor.as_subclass(tensor, torch.Tensor)
    if type(base) is not torch.Tensor or base.layout != torch.strided or base.is_quantized:
        raise NotPlain(type_name(tensor))
    base = base.detach()
    data = base.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return ("tensor", str(base.dtype).removeprefix("torch."), tuple(base.shape), str(base.device), data)


def _flat_array(array: np.ndarray) -> tuple:
    if array.dtype.hasobject:
        return ("objects", array.shape, [flatten(item) for item in array.ravel().tolist()])
    if array.dtype.fields is not None:
        raise NotPlain("a structured numpy array")
    return ("array", array.dtype.str, array.shape, np.ascontiguousarray(array).tobytes())


def _flat_values(values: Any) -> tuple:
    """A pandas column or index's values (its ``.array``): numpy dtypes as numpy arrays, categories with
    their codes, other extension arrays as objects with their dtype's name."""
    if isinstance(values, pd.Categorical):
        categories = _flat_pandas(values.categories)
        return ("categorical", _flat_array(values.codes), categories, bool(values.ordered))
    if isinstance(values.dtype, np.dtype):
        return _flat_array(np.asarray(values))
    return ("extension", str(values.dtype), _flat_array(np.asarray(values, dtype=object)))


def _flat_pandas(value: Any) -> tuple:
    if type(value) is pd.RangeIndex:
        return ("range", value.start, value.stop, value.step, flatten(value.name))
    if type(value) is pd.MultiIndex:
        levels = [_flat_pandas(level) for level in value.levels]
        codes = [_flat_array(np.asarray(c)) for c in value.codes]
        return ("multiindex", levels, codes, [flatten(n) for n in value.names])
    if isinstance(value, pd.Index):
        return ("index", _flat_values(value.array), flatten(value.name))
    if type(value) is pd.Series:
        return ("series", _flat_values(value.array), _flat_pandas(value.index), flatten(value.name))
    columns = [_flat_values(value.iloc[:, i].array) for i in range(value.shape[1])]
    return ("frame", columns, _flat_pandas(value.index), _flat_pandas(value.columns))


def _declared(kind: type) -> bool:
    """decpriv's own result types: its dataclasses, named tuples and enums."""
    own = kind.__module__ == "decpriv" or kind.__module__.startswith("decpriv.")
    named_tuple = issubclass(kind, tuple) and hasattr(kind, "_fields")
    return own and (dataclasses.is_dataclass(kind) or named_tuple or issubclass(kind, enum.Enum))


def _flat_record(value: Any) -> tuple:
    kind = type(value)
    if issubclass(kind, enum.Enum):
        fields = flatten(value.value)
    elif issubclass(kind, tuple):
        fields = flatten(tuple(value))
    else:
        init = [f.name for f in dataclasses.fields(value) if f.init]
        fields = flatten({name: getattr(value, name) for name in init})
    return ("record", kind.__module__, kind.__qualname__, fields)


def build(tree: Any) -> Any:
    """The plain value a tree of primitives stands for."""
    kind = type(tree)
    if kind in PRIMITIVE:
        return tree
    if kind is not tuple or not tree or type(tree[0]) is not str or tree[0] not in BUILDERS:
        raise NotPlain(f"a value tagged {tree[0]!r}" if kind is tuple and tree else type_name(tree))
    return BUILDERS[tree[0]](*tree[1:])


def _items(items: list) -> list:
    if type(items) is not list:
        raise NotPlain(type_name(items))
    return [build(item) for item in items]


def _dict(pairs: list) -> dict:
    if type(pairs) is not list or any(type(p) is not tuple or len(p) != 2 for p in pairs):
        raise NotPlain("a dict that is not a list of pairs")
    return {build(key): build(value) for key, value in pairs}


def _tensor(dtype: str, shape: tuple, device: str, data: bytes) -> torch.Tensor:
    kind = getattr(torch, dtype, None)
    if not isinstance(kind, torch.dtype) or type(data) is not bytes:
        raise NotPlain(f"a tensor of dtype {dtype!r}")
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    tensor = flat.view(kind).reshape(_shape(shape))
    return tensor if device == "cpu" else tensor.to(torch.device(device))


def _shape(shape: Any) -> tuple[int, ...]:
    if type(shape) is not tuple or any(type(n) is not int or n < 0 for n in shape):
        raise NotPlain(f"a shape {shape!r}")
    return shape


def _array(dtype: str, shape: tuple, data: bytes) -> np.ndarray:
    kind = np.dtype(dtype)
    if kind.hasobject or kind.fields is not None or type(data) is not bytes:
        raise NotPlain(f"a numpy array of dtype {dtype!r}")
    return np.frombuffer(data, dtype=kind).reshape(_shape(shape)).copy()


def _objects(shape: tuple, items: list) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = _items(items) if items else []
    return out.reshape(_shape(shape))


def _scalar(array: tuple) -> np.generic:
    value = build(array)
    if type(value) is not np.ndarray or value.shape != ():
        raise NotPlain("a numpy scalar that is not a 0-d array")
    return value[()]


def _values(tree: tuple) -> Any:
    if type(tree) is not tuple or tree[:1] not in (
        ("array",),
        ("objects",),
        ("categorical",),
        ("extension",),
    ):
        raise NotPlain("pandas values that are not an array")
    return build(tree)


def _categorical(codes: tuple, categories: tuple, ordered: bool) -> pd.Categorical:
    return pd.Categorical.from_codes(build(codes), categories=_index(categories), ordered=ordered is True)


def _extension(dtype: str, objects: tuple) -> Any:
    return pd.array(build(objects), dtype=pd.api.types.pandas_dtype(dtype))


def _index(tree: tuple) -> pd.Index:
    if type(tree) is not tuple or tree[:1] not in (("range",), ("index",), ("multiindex",)):
        raise NotPlain("a pandas index that is not one")
    return build(tree)


def _multiindex(levels: list, codes: list, names: list) -> pd.MultiIndex:
    built = [_index(level) for level in levels]
    return pd.MultiIndex(levels=built, codes=[_values(c) for c in codes], names=_items(names))


def _frame(columns: list, index: tuple, labels: tuple) -> pd.DataFrame:
    values = [_values(column) for column in columns]
    frame = pd.DataFrame(dict(enumerate(values)), index=_index(index))
    frame.columns = _index(labels)
    return frame


def _record(module: str, qualname: str, fields: Any) -> Any:
    """decpriv's own declared type ``module.qualname``, built through its constructor."""
    name = f"{module}.{qualname}"
    if type(module) is not str or not (module == "decpriv" or module.startswith("decpriv.")):
        raise NotPlain(name)
    kind: Any = sys.modules.get(module) or importlib.import_module(module)
    for part in qualname.split("."):
        if part.startswith("_"):
            raise NotPlain(name)
        kind = getattr(kind, part, None)
    if not isinstance(kind, type) or kind.__module__ != module or not _declared(kind):
        raise NotPlain(name)
    values = build(fields)
    if issubclass(kind, enum.Enum):
        return kind(values)
    if issubclass(kind, tuple):
        return kind(*values)
    if type(values) is not dict or any(type(k) is not str for k in values):
        raise NotPlain(f"{name} with fields that are not named")
    return kind(**values)


BUILDERS = {
    "list": lambda items: _items(items),
    "tuple": lambda items: tuple(_items(items)),
    "set": lambda items: set(_items(items)),
    "frozenset": lambda items: frozenset(_items(items)),
    "dict": _dict,
    "na": lambda: pd.NA,
    "complex": lambda re, im: complex(float(re), float(im)),
    "tensor": _tensor,
    "array": _array,
    "objects": _objects,
    "scalar": _scalar,
    "categorical": _categorical,
    "extension": _extension,
    "range": lambda start, stop, step, name: pd.RangeIndex(
        int(start), int(stop), int(step), name=build(name)
    ),
    "index": lambda values, name: pd.Index(_values(values), name=build(name)),
    "multiindex": _multiindex,
    "series": lambda values, index, name: pd.Series(_values(values), index=_index(index), name=build(name)),
    "frame": _frame,
    "record": _record,
}
