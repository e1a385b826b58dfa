"""Graph-to-graph transforms: each takes a ``Graph`` and returns a new one, replaying the
source graph into a fresh trace with each primitive's rule; the rewriter then cleans up."""

from .inline import inline, constant_tensor
from .jvp import jvp_graph
from .vjp import vjp_graph
from .batching import batch_graph

__all__ = ["inline", "constant_tensor", "jvp_graph", "vjp_graph", "batch_graph"]
