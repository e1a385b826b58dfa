"""Graph-to-graph transforms: each takes a ``Graph`` and returns a new one, replaying the
source graph into a fresh trace (``quabla.core.replay``) with each primitive's rule; the
rewriter then cleans up."""

from .inline import inline
from .jvp import jvp_graph
from .vjp import vjp_graph
from .batching import batch_graph

__all__ = ["inline", "jvp_graph", "vjp_graph", "batch_graph"]
