"""The NumPy reference interpreter: evaluates a graph op by op with each primitive's ``impl``.

Every other back end is tested against it, and it needs no compiler.
"""

import numpy as np

from quabla.core.graph import RESULTS
from quabla.core.primitives import PRIMITIVES

__all__ = ["Interpreter", "evaluate"]


def evaluate(graph, args):
    """The outputs of ``graph`` for ``args``. Each value is dropped after its last reader, so
    the working set stays small and freed memory is reused (fresh pages cost more than the
    arithmetic on them)."""
    last = {o: nid for nid, node in enumerate(graph.nodes) for o in node.operands}
    last.update((o, len(graph.nodes)) for o in graph.outputs)
    env = {}
    for nid, value in zip(graph.inputs, args):
        env[nid] = value
    with np.errstate(all="ignore"):
        for nid, node in enumerate(graph.nodes):
            if node.op == "input":
                continue
            if node.op == "constant":
                env[nid] = node.kw["value"].value
                continue
            value = PRIMITIVES[node.op].impl(*[env[o] for o in node.operands], **dict(node.params))
            env[nid] = value if node.dtype is RESULTS else np.asarray(value, dtype=node.dtype.numpy)
            for o in node.operands:
                if last[o] == nid:
                    env.pop(o, None)
    return [np.array(env[o], dtype=graph.nodes[o].dtype.numpy, copy=True, order="C")
            for o in graph.outputs]


class Interpreter:
    """An executable that interprets its graph on every call."""

    def __init__(self, graph):
        self.graph = graph
        self.source = None

    def __call__(self, *args):
        return evaluate(self.graph, args)

    def run(self, *args):
        return evaluate(self.graph, args)
