"""grad and value_and_grad: the VJP of a scalar function seeded with one, as one program."""

from ..transforms import vjp_graph
from .signature import Aval
from .staged import Staged
from .transform import Transform, arg_ranges, argnum_leaves, graph_inputs, normalize_argnums

__all__ = ["Grad", "staged_grad"]


class Grad(Transform):
    """Gradients with respect to ``argnums``, one tree per argument (None for bool leaves);
    ``with_value`` puts the value first (``value_and_grad``), ``has_aux`` keeps ``aux``."""

    def __init__(self, argnums, has_aux, with_value, kind):
        self.argnums, self.single = normalize_argnums(argnums)
        self.has_aux = has_aux
        self.with_value = with_value
        self.kind = kind

    def name(self, inner):
        return f"{self.kind}({inner})"

    def differentiated(self, treedef):
        return argnum_leaves(self.argnums, treedef)

    def stage(self, traced, treedef, template):
        graph = traced.graph
        out_tree = traced.out_tree
        n_out = len(graph.outputs)
        if self.has_aux:
            children = out_tree.children()
            if out_tree.node_type is not tuple or len(children) != 2:
                raise TypeError(f"{self.kind}(has_aux=True) needs a function returning (loss, aux)")
            loss_tree, _ = children
            if loss_tree.num_leaves != 1:
                raise TypeError(f"{self.kind}: the loss must be one array")
        elif out_tree.num_leaves != 1 or out_tree.node_type is not None:
            raise TypeError(f"{self.kind} needs a function returning one scalar array")
        shape, dtype = graph.out_avals[0]
        if not dtype.is_floating:
            raise TypeError(f"{self.kind} needs a floating output, got {dtype}")
        if shape != ():
            raise ValueError(
                f"{self.kind} needs a scalar (rank-0) output, got shape {list(shape)}; reduce it "
                "(for example with quabla.sum), or use jacobian or vjp for non-scalar outputs"
            )
        # which graph inputs (dynamic leaves) belong to each differentiated argument
        ranges, arg_trees = arg_ranges(treedef)
        input_of_leaf = graph_inputs(template)
        wrt = []
        layout = []  # per argnum: list of (graph output index | None) per leaf of that argument
        for a in self.argnums:
            slots = []
            for i in ranges[a]:
                leaf = template[i]
                if type(leaf) is not Aval:
                    raise TypeError(
                        f"{self.kind}: argument {a} has a non-array leaf {leaf!r} that cannot be "
                        "differentiated"
                    )
                if leaf.dtype.is_floating:
                    slots.append(n_out + len(wrt))
                    wrt.append(input_of_leaf[i])
                else:
                    slots.append(None)
            layout.append(slots)
        g = vjp_graph(graph, wrt, ["ones"] + [None] * (n_out - 1))
        argnum_trees = [arg_trees[a] for a in self.argnums]

        def assemble(outs):
            grads = [
                t.unflatten([None if s is None else outs[s] for s in slots])
                for t, slots in zip(argnum_trees, layout)
            ]
            grads = grads[0] if self.single else tuple(grads)
            if self.has_aux:
                value, aux = out_tree.unflatten(outs[:n_out])
                return ((value, aux), grads) if self.with_value else (grads, aux)
            return (outs[0], grads) if self.with_value else grads

        return g, assemble


def staged_grad(fun, argnums, has_aux, with_value, kind):
    """``grad``/``value_and_grad`` of ``fun`` as a Staged (``hessian`` stages one too)."""
    transform = Grad(argnums, has_aux, with_value, kind)
    return Staged(fun, transform, config=(kind, transform.argnums, transform.single, bool(has_aux)))
