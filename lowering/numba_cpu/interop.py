"""Calling a compiled entry from users' own ``@numba.njit`` code (``Compiled.numba``).

The entry takes one pointer, to what it reads as a tuple of arrays: at ``TUPLE_ITEMS`` bytes
the item pointers, and at ``ARRAY_DATA`` bytes into each item its data pointer
(``lowering/native.py``). Numba code can build that layout in an integer array of its own, so a
generated ``njit`` function allocates the results and scratch with ``np.empty``, fills in the
pointers and calls the entry's address as a ``ctypes`` function: no Python object and no
interpreter round trip per call. A threaded entry (passes.phased) is called once per
phase control row, all on the caller's thread: the user's code decides about threads. The
machine code and the constants it reads are pinned for the life of the process, as Numba's own
compiled code is: the dispatcher can be called from code compiled long after the executable is
gone.
"""

import ctypes

import numpy as np

from .. import abi

__all__ = ["numba_function"]

_WORD = ctypes.sizeof(ctypes.c_void_p)
_PINNED = []  # (machine code handle, constants) of every executable given a .numba


def _np_name(dtype):
    """How the generated source names a NumPy dtype (a dtype or a scratch buffer's name)."""
    return "np.bool_" if dtype in ("bool", np.bool_) else f"np.{np.dtype(dtype).name}"


def numba_function(executable, name):
    """A ``numba.njit`` dispatcher running ``executable`` (a ``NativeExecutable``, or a
    ``TermsExecutable``: its terms' dispatchers called in turn): one argument per graph input
    (an array of its dtype and shape, any layout, or a scalar for a 0-d one), returning the
    output (a scalar for a 0-d one), or a tuple of them for several."""
    import numba

    if hasattr(executable, "terms"):
        return _terms_function(executable, name)
    graph = executable.graph
    inputs = [graph.nodes[i] for i in graph.inputs]
    outputs = [graph.nodes[o] for o in graph.outputs]
    constants = list(executable.constants)
    controls = [row for rows in executable.phases for row in rows]
    _PINNED.append((executable.keep, constants, controls))
    lines = [f"def {name}({', '.join(f'a{k}' for k in range(len(inputs)))}):"]
    for k, node in enumerate(inputs):
        if node.shape == ():
            lines += [f"    c{k} = np.empty(1, {_np_name(node.dtype.numpy)})",
                      f"    c{k}[0] = a{k}"]
        else:
            shape = tuple(node.shape)
            lines += [f"    if a{k}.shape != {shape}:",
                      f"        raise ValueError('{name}: argument {k} must have shape {shape}')",
                      f"    c{k} = np.ascontiguousarray(a{k})"]
    for k, node in enumerate(outputs):
        lines.append(f"    o{k} = np.empty({tuple(node.shape) or 1}, {_np_name(node.dtype.numpy)})")
    for k, (dtype, size) in enumerate(executable.buffers):
        lines.append(f"    w{k} = np.empty({size}, {_np_name(dtype)})")
    owned = ([f"c{k}" for k in range(len(inputs))] + [f"o{k}" for k in range(len(outputs))])
    scratch = [f"w{k}" for k in range(len(executable.buffers))]
    lines.append(f"    _call({', '.join(owned + scratch)})")
    results = [f"o{k}[0]" if node.shape == () else f"o{k}" for k, node in enumerate(outputs)]
    lines.append("    return " + (results[0] if len(results) == 1 else
                                 "(" + "".join(r + ", " for r in results) + ")"))
    lines += _caller(owned, [c.ctypes.data for c in constants], scratch,
                     [c.ctypes.data for c in controls])
    namespace = {"np": np,
                 "entry": ctypes.CFUNCTYPE(None, ctypes.c_void_p)(executable.address)}
    exec("\n".join(lines) + "\n", namespace)
    namespace["_call"] = numba.njit(namespace["_call"])
    return numba.njit(tuple(_numba_type(node) for node in inputs))(namespace[name])


def _terms_function(executable, name):
    """``numba_function`` of a ``TermsExecutable``: each term's dispatcher called in order,
    the sums so far of its outputs passed to the next."""
    import numba

    graph = executable.graph
    namespace, last = {}, {}
    lines = [f"def {name}({', '.join(f'a{k}' for k in range(len(graph.inputs)))}):"]
    for i, (term, part) in enumerate(zip(executable.terms, executable.executables)):
        namespace[f"t{i}"] = numba_function(part, f"{name}_{i}")
        args = [f"a{k}" for k in term.inputs] + [last[k] for k in term.outputs if i]
        lines.append(f"    r{i} = t{i}({', '.join(args)})")
        one = len(term.outputs) == 1  # a dispatcher of one output returns it alone
        last.update((k, f"r{i}" if one else f"r{i}[{j}]") for j, k in enumerate(term.outputs))
    results = [last[k] for k in range(len(graph.outputs))]
    lines.append("    return " + (results[0] if len(results) == 1 else
                                 "(" + "".join(r + ", " for r in results) + ")"))
    exec("\n".join(lines) + "\n", namespace)
    inputs = [graph.nodes[i] for i in graph.inputs]
    return numba.njit(tuple(_numba_type(node) for node in inputs))(namespace[name])


def _caller(owned, constant_addresses, scratch, control_addresses):
    """``_call(*owned, *scratch)``: lays out the entry's argument tuple (inputs, results,
    scratch, a threaded entry's control row, and the constants) and calls it, once per
    control row if there are any. The arrays are its arguments, so its caller keeps them
    alive until the entry returns; the one layout array is the argument of that call."""
    cell = abi.ARRAY_DATA // _WORD + 1  # a stand-in array object: its data pointer, last
    head = abi.TUPLE_ITEMS // _WORD     # where the tuple's item pointers start
    pointers = ([f"{a}.ctypes.data" for a in owned] + [f"{a}.ctypes.data" for a in scratch]
                + (["0"] if control_addresses else []) + [str(a) for a in constant_addresses])
    n = len(pointers)
    lines = [f"def _call({', '.join(owned + scratch)}):",
             f"    layout = np.zeros({head + n + n * cell}, np.intp)",
             "    base = layout.ctypes.data"]
    for k, pointer in enumerate(pointers):
        item = head + n + k * cell
        lines += [f"    layout[{head + k}] = base + {item * _WORD}",
                  f"    layout[{item + cell - 1}] = {pointer}"]
    if not control_addresses:
        return lines + ["    entry(layout.ctypes)"]
    k = len(owned) + len(scratch)  # the control row's item: its data pointer
    control = head + n + k * cell + cell - 1
    for address in control_addresses:
        lines += [f"    layout[{control}] = {address}", "    entry(layout.ctypes)"]
    return lines


def _numba_type(node):
    """The Numba type of an input: a read-only array of any layout, a scalar if 0-d."""
    from numba import types

    dtype = node.dtype.numpy
    scalar = types.boolean if dtype == np.bool_ else getattr(types, dtype.name)
    return scalar if node.shape == () else types.Array(scalar, len(node.shape), "A", readonly=True)
