"""Pieces of the generated CUDA source: flat-index arithmetic, kernel names made canonical,
element loads bound once, and the Numba types of device arrays."""

import math
import re

__all__ = ["ARRAY", "unflatten", "indent", "blocks", "canonical", "bind_loads", "order",
           "nbytes", "array_type"]

ARRAY = re.compile(r"\b[vpw]\d+[a-z]?\b")  # device arrays: values, partials, workspaces


def unflatten(var, dims, shape, prefix="i"):
    """Lines binding ``{prefix}{d}`` for each axis ``d`` of ``dims`` (C order) from the flat
    index ``var`` over those axes of ``shape``."""
    lines, stride = [], 1
    for d in reversed(dims):
        div = f"{var} // {stride}" if stride != 1 else var
        mod = f"({div}) % {shape[d]}" if d != dims[0] else div
        lines.append(f"{prefix}{d} = {mod}")
        stride *= shape[d]
    return lines


def indent(lines, depth):
    return ["    " * depth + line for line in lines]


def blocks(n, per_block, most):
    return max(1, min(-(-n // per_block), most))


_RENAMED = re.compile(r"\b(?:[vpw]\d+[a-z]?|[sa]\d+)\b")  # arrays, elements, accumulators


def canonical(body, arrays):
    """``body`` with its arrays named ``x0``, ``x1``, ... in the order of ``arrays`` (the
    kernel's parameters), its elements (``s<node>``) ``e0``, ``e1``, ... and its accumulators
    (``a<node>``) ``z0``, ``z1``, ... in the order they first appear."""
    names = {a: f"x{k}" for k, a in enumerate(arrays)}
    counts = {"s": 0, "a": 0}

    def rename(match):
        word = match.group(0)
        if word not in names:
            kind = word[0]
            names[word] = f"{'e' if kind == 's' else 'z'}{counts[kind]}"
            counts[kind] += 1
        return names[word]
    return _RENAMED.sub(rename, "\n".join(body))


_LOAD = re.compile(r"\b[vpw]\d+[a-z]?\[[^\[\]]*\]")  # an element read from a device array


def bind_loads(lines):
    """The assignments ``lines`` with each element read more than once bound to a local
    (``m0 = v3[i0, i1]``) before its first use. Their reads are all in bounds, and of arrays
    the kernel does not write, so reading once is the same; it is fewer statements for Numba
    to type and lower, and fewer loads from device memory."""
    split = [line.split(" = ", 1) for line in lines]
    count = {}
    for _, value in split:
        for load in _LOAD.findall(value):
            count[load] = count.get(load, 0) + 1
    names, out = {}, []
    for target, value in split:
        for load in _LOAD.findall(value):
            if count[load] > 1 and load not in names:
                names[load] = f"m{len(names)}"
                out.append(f"{names[load]} = {load}")
        out.append(f"{target} = " + _LOAD.sub(lambda m: names.get(m[0], m[0]), value))
    return out


def order(name):
    return (int(re.sub(r"\D", "", name)), name)


def nbytes(dtype, shape):
    return math.prod(shape) * {"float64": 8, "float32": 4, "bool": 1}[dtype]


def array_type(dtype, shape):
    """The Numba type of a C-contiguous device array (how every kernel argument is made)."""
    name = {"float64": "float64", "float32": "float32", "bool": "boolean"}[dtype]
    return f"{name}[{', '.join([':'] * (len(shape) - 1) + ['::1'])}]"
