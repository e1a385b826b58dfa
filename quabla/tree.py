"""Pytrees (spec 004 §6.1): nested containers flattened to leaves plus a hashable ``TreeDef``.

Each container type has a node kind that splits a value into children and rebuilds it. Kinds are
found by a dict lookup on ``type(x)``; leaf types are cached in the same dict, so flattening (run
on every call of a compiled function) costs one lookup per node.
"""

import dataclasses
from operator import itemgetter

__all__ = [
    "TreeDef", "flatten", "unflatten", "leaves", "structure", "map", "flatten_with_path",
    "register", "register_dataclass", "broadcast_prefix",
]


class _Leaf:
    """The leaf marker: a leaf's node in a TreeDef and the cache entry for leaf types."""

    __slots__ = ()

    def __repr__(self):
        return "*"


_LEAF = _Leaf()


# -- node kinds ------------------------------------------------------------------------------
# A kind turns a value into (children, aux) and back; aux is the hashable, static part (dict keys,
# meta values) that belongs to the TreeDef. Kinds compare by identity: one kind per class.

class _Kind:
    """How one container type splits into children, rebuilds, names its children and prints."""

    def __init__(self, node_type):
        self.node_type = node_type

    def keys(self, aux, n):
        """Path entries of the n children: positions unless the kind has names."""
        return range(n)

    def format(self, aux, parts):
        name = self.node_type.__name__
        args = ", ".join(parts)
        return f"{name}({args})" if aux is None else f"{name}[{aux!r}]({args})"


class _DictKind(_Kind):
    def flatten(self, x):
        try:
            keys = tuple(sorted(x))
        except TypeError:
            raise TypeError(
                "pytree dict keys must be mutually sortable (all str or all int), got "
                f"{sorted({type(k).__name__ for k in x})}") from None
        return [x[k] for k in keys], keys

    def unflatten(self, aux, children):
        return dict(zip(aux, children))

    def keys(self, aux, n):
        return aux

    def format(self, aux, parts):
        return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(aux, parts)) + "}"


class _ListKind(_Kind):
    def flatten(self, x):
        return x, None

    def unflatten(self, aux, children):
        return list(children)

    def format(self, aux, parts):
        return "[" + ", ".join(parts) + "]"


class _TupleKind(_Kind):
    def flatten(self, x):
        return x, None

    def unflatten(self, aux, children):
        return tuple(children)

    def format(self, aux, parts):
        return "(" + parts[0] + ",)" if len(parts) == 1 else "(" + ", ".join(parts) + ")"


class _NoneKind(_Kind):
    def flatten(self, x):
        return (), None

    def unflatten(self, aux, children):
        return None

    def format(self, aux, parts):
        return "None"


class _NamedTupleKind(_Kind):
    def flatten(self, x):
        return x, None

    def unflatten(self, aux, children):
        return self.node_type(*children)

    def keys(self, aux, n):
        return self.node_type._fields

    def format(self, aux, parts):
        fields = ", ".join(f"{f}={p}" for f, p in zip(self.node_type._fields, parts))
        return f"{self.node_type.__name__}({fields})"


class _DataclassKind(_Kind):
    """Data fields are children; meta field values are the aux data."""

    def __init__(self, cls, data_fields, meta_fields, order):
        super().__init__(cls)
        self.data_fields = data_fields
        self.meta_fields = meta_fields
        self.order = order  # every init field, in declaration order, for printing

    def flatten(self, x):
        children = [getattr(x, f) for f in self.data_fields]
        if not self.meta_fields:
            return children, ()
        aux = tuple([getattr(x, f) for f in self.meta_fields])
        _check_hashable(aux, self.node_type, self.meta_fields)
        return children, aux

    def unflatten(self, aux, children):
        kwargs = dict(zip(self.data_fields, children))
        kwargs.update(zip(self.meta_fields, aux))
        return self.node_type(**kwargs)

    def keys(self, aux, n):
        return self.data_fields

    def format(self, aux, parts):
        shown = dict(zip(self.data_fields, parts))
        shown.update((f, repr(v)) for f, v in zip(self.meta_fields, aux))
        fields = ", ".join(f"{f}={shown[f]}" for f in self.order)
        return f"{self.node_type.__name__}({fields})"


class _CustomKind(_Kind):
    """A class registered with ``register``: user functions do the work."""

    def __init__(self, cls, flatten_fn, unflatten_fn):
        super().__init__(cls)
        self.flatten_fn = flatten_fn
        self.unflatten_fn = unflatten_fn

    def flatten(self, x):
        children, aux = self.flatten_fn(x)
        if aux is not None:
            _check_hashable((aux,), self.node_type, ("aux_data",))
        return tuple(children), aux

    def unflatten(self, aux, children):
        return self.unflatten_fn(aux, tuple(children))


def _check_hashable(values, cls, names):
    """Static values live in the TreeDef, which transforms hash, so reject unhashable ones now."""
    try:
        hash(values)
    except TypeError:
        for name, v in zip(names, values):
            try:
                hash(v)
            except TypeError:
                raise TypeError(
                    f"{cls.__name__}.{name} is static pytree data and must be hashable, got "
                    f"unhashable {type(v).__name__}; make it a data field or use a hashable "
                    "value (e.g. a tuple instead of a list)") from None
        raise


_DICT, _LIST, _TUPLE = _DictKind(dict), _ListKind(list), _TupleKind(tuple)

# type -> kind, or _LEAF for a type already seen to be a leaf.
_NONE = _NoneKind(type(None))
_KINDS = {dict: _DICT, list: _LIST, tuple: _TUPLE, type(None): _NONE}
_BUILTIN = frozenset(_KINDS)


def _classify(x):
    """Kind of a type not in ``_KINDS`` yet (cached), or TypeError for a rejected container."""
    cls = type(x)
    if isinstance(x, tuple) and hasattr(cls, "_fields"):
        kind = _NamedTupleKind(cls)
    elif isinstance(x, (dict, list)):
        base = "dict" if isinstance(x, dict) else "list"
        raise TypeError(
            f"{cls.__name__} is a subclass of {base} and is not a pytree container; convert it "
            f"to a plain {base} or register it with qb.tree.register")
    elif dataclasses.is_dataclass(cls):
        raise TypeError(
            f"dataclass {cls.__name__} is not a registered pytree container; register it with "
            f"qb.tree.register_dataclass({cls.__name__}) or convert it to a dict")
    else:
        kind = _LEAF
    _KINDS[cls] = kind
    return kind


def _kind_of(x, is_leaf):
    if is_leaf is not None and is_leaf(x):
        return _LEAF
    return _KINDS.get(type(x)) or _classify(x)


# -- TreeDef ---------------------------------------------------------------------------------
# A node is _LEAF or a tuple (kind, aux, child_nodes): plain tuples, so equality and hashing run
# in C.

class TreeDef:
    """The structure of a pytree: immutable, compared and hashed by structure."""

    __slots__ = ("_node", "_num_leaves", "_hash", "_build", "_match")

    # Immutable by convention, like Fraction: private slots behind read-only properties (an
    # enforcing __setattr__ would slow down the construction done on every flatten).
    def __init__(self, node, num_leaves):
        self._node = node
        self._num_leaves = num_leaves
        self._hash = None
        self._build = None  # None: never unflattened; False: once; then the generated builder
        self._match = None

    @property
    def num_leaves(self):
        return self._num_leaves

    @property
    def node_type(self):
        """The root container's type, or None when the whole tree is one leaf."""
        return None if self._node is _LEAF else self._node[0].node_type

    def children(self):
        """The TreeDefs of the root's children ([] for a leaf)."""
        if self._node is _LEAF:
            return []
        return [TreeDef(c, _count_leaves(c)) for c in self._node[2]]

    def unflatten(self, leaves):
        """Rebuild a tree of this structure from ``leaves`` in flatten order."""
        if not isinstance(leaves, (list, tuple)):
            leaves = list(leaves)
        if len(leaves) != self._num_leaves:
            raise ValueError(f"{self} has {self._num_leaves} leaves, got {len(leaves)}")
        if self._node is _LEAF:  # the common single-array result, on the hot path
            return leaves[0]
        build = self._build
        if build:
            return build(leaves)
        if build is None:  # a TreeDef unflattened once (most are) is not worth generating for
            self._build = False
            return _unflatten(self._node, iter(leaves))
        return self.builder()(leaves)

    def builder(self):
        """``build(leaves)``: ``unflatten`` without its checks, generated as one expression,
        for a hot path that has checked the number of leaves itself."""
        build = self._build
        if not build:
            if self._node is _LEAF:
                build = itemgetter(0)
            else:
                build = _generated_builder(self._node) or _recursive_builder(self._node)
            self._build = build
        return build

    def matcher(self):
        """``match(x)``: the leaves of ``x`` (a list) when ``x`` has exactly this structure and
        its leaves are of types flatten has already seen as leaves, else None. A hot path
        (an optimizer update) calls it instead of flattening and comparing TreeDefs."""
        match = self._match
        if match is None:
            match = self._match = _generated_matcher(self._node) or self._flattening_matcher()
        return match

    def flatten_up_to(self, x):
        """The subtrees of ``x`` at this structure's leaves (any value there, None included),
        in flatten order; ``ValueError`` naming both structures where ``x`` differs above
        them (gradients matched to parameters, where None marks a leaf without one)."""
        out = []
        if not _up_to(self._node, x, out):
            raise ValueError(f"{structure(x, is_leaf=lambda v: v is None)} does not match "
                             f"{self}")
        return out

    def _flattening_matcher(self):
        def match(x):
            out, treedef = flatten(x)
            return out if treedef == self else None
        return match

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, TreeDef):
            return NotImplemented
        if self._num_leaves != other._num_leaves:
            return False
        if self._hash is not None and other._hash is not None and self._hash != other._hash:
            return False
        return self._node == other._node

    def __hash__(self):
        h = self._hash
        if h is None:
            h = self._hash = hash(self._node)
        return h

    def __repr__(self):
        return f"TreeDef({_format(self._node)})"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError("TreeDef cannot be pickled; save the tree itself instead")


def _up_to(node, x, out):
    if node is _LEAF:
        out.append(x)
        return True
    kind, aux, children = node
    if _kind_of(x, None) is not kind:
        return False
    parts, x_aux = kind.flatten(x)
    if x_aux != aux or len(parts) != len(children):
        return False
    return all(_up_to(c, p, out) for c, p in zip(children, parts))


def _count_leaves(node):
    return 1 if node is _LEAF else sum(_count_leaves(c) for c in node[2])


def _format(node):
    if node is _LEAF:
        return "*"
    kind, aux, children = node
    return kind.format(aux, [_format(c) for c in children])


def _unflatten(node, it):
    if node is _LEAF:
        return next(it)
    kind, aux, children = node
    return kind.unflatten(aux, [_unflatten(c, it) for c in children])


# -- generated code for hot paths: straight-line builders and matchers of one structure -------
# Trees deeper than this keep the recursive path (Python's parser limits nesting).
_GENERATED_DEPTH = 40


def _depth(node):
    return 0 if node is _LEAF else 1 + max((_depth(c) for c in node[2]), default=0)


def _recursive_builder(node):
    return lambda leaves: _unflatten(node, iter(leaves))


def _generated_builder(node):
    """A function of the leaves list building ``node``'s tree in one expression, or None for a
    tree too deep to generate."""
    if _depth(node) > _GENERATED_DEPTH:
        return None
    namespace, position = {}, iter(range(_count_leaves(node)))

    def constant(value):
        name = f"c{len(namespace)}"
        namespace[name] = value
        return name

    def expression(node):
        if node is _LEAF:
            return f"v[{next(position)}]"
        kind, aux, children = node
        parts = [expression(c) for c in children]
        if kind is _DICT:
            return "{" + ", ".join(f"{constant(k)}: {p}" for k, p in zip(aux, parts)) + "}"
        if kind is _LIST:
            return "[" + ", ".join(parts) + "]"
        if kind is _TUPLE:
            return "(" + "".join(p + ", " for p in parts) + ")"
        if kind is _NONE:
            return "None"
        return f"{constant(kind)}.unflatten({constant(aux)}, [{', '.join(parts)}])"

    body = expression(node)
    exec(f"def build(v):\n    return {body}\n", namespace)
    return namespace["build"]


def _generated_matcher(node):
    """The statements of ``TreeDef.matcher`` for a tree of built-in containers, or None (a
    registered, named-tuple or dataclass node, or a tree too deep)."""
    if _depth(node) > _GENERATED_DEPTH:
        return None
    lines, leaves = ["def match(x):"], []
    namespace = {"kinds": _KINDS, "leaf": _LEAF, "missing": _Leaf()}

    def visit(node, var):
        if node is _LEAF:
            lines.append(f"    if kinds.get(type({var})) is not leaf: return None")
            leaves.append(var)
            return True
        kind, aux, children = node
        names = [f"{var}_{i}" for i in range(len(children))]
        if kind is _DICT:  # a missing key reads as ``missing``, which no check accepts
            lines.append(f"    if type({var}) is not dict or len({var}) != {len(aux)}: return None")
            for i, (key, name) in enumerate(zip(aux, names)):
                namespace[f"{name}_key"] = key
                lines.append(f"    {name} = {var}.get({name}_key, missing)")
        elif kind is _LIST or kind is _TUPLE:
            container = "list" if kind is _LIST else "tuple"
            lines.append(f"    if type({var}) is not {container} or len({var}) != {len(names)}: "
                         "return None")
            if names:
                lines.append(f"    {''.join(n + ', ' for n in names)}= {var}")
        elif kind is _NONE:
            lines.append(f"    if {var} is not None: return None")
        else:
            return False
        return all([visit(c, name) for c, name in zip(children, names)])

    if not visit(node, "x"):
        return None
    lines.append(f"    return [{', '.join(leaves)}]")
    exec("\n".join(lines) + "\n", namespace)
    return namespace["match"]


def _paths(node, prefix, out):
    if node is _LEAF:
        out.append(prefix)
        return
    kind, aux, children = node
    for key, child in zip(kind.keys(aux, len(children)), children):
        _paths(child, prefix + (key,), out)


# -- public functions ------------------------------------------------------------------------

def _flatten(x, out, is_leaf):
    if is_leaf is not None and is_leaf(x):
        kind = _LEAF
    else:  # _kind_of, inlined: this is the hot path
        kind = _KINDS.get(type(x)) or _classify(x)
    if kind is _LEAF:
        out.append(x)
        return _LEAF
    children, aux = kind.flatten(x)
    return (kind, aux, tuple([_flatten(c, out, is_leaf) for c in children]))


def flatten(tree, is_leaf=None):
    """``(leaves, treedef)``; ``is_leaf(x)`` true stops descent and makes ``x`` a leaf."""
    out = []
    node = _flatten(tree, out, is_leaf)
    return out, TreeDef(node, len(out))


def unflatten(treedef, leaves):
    """Rebuild a tree from its TreeDef and leaves (as ``treedef.unflatten(leaves)``)."""
    return treedef.unflatten(leaves)


def leaves(tree, is_leaf=None):
    """The leaves of ``tree`` in flatten order."""
    return flatten(tree, is_leaf)[0]


def structure(tree, is_leaf=None):
    """The TreeDef of ``tree``."""
    return flatten(tree, is_leaf)[1]


def flatten_with_path(tree, is_leaf=None):
    """``([(path, leaf), ...], treedef)``; a path holds dict keys, field names and positions."""
    out, treedef = flatten(tree, is_leaf)
    paths = []
    _paths(treedef._node, (), paths)
    return list(zip(paths, out)), treedef


def map(f, tree, *rest, is_leaf=None):
    """Apply ``f`` leafwise over trees of one structure; the result has that structure."""
    out, treedef = flatten(tree, is_leaf)
    columns = [out]
    for other in rest:
        other_leaves, other_def = flatten(other, is_leaf)
        if other_def != treedef:
            raise ValueError(f"tree.map: trees differ in structure: {treedef} vs {other_def}")
        columns.append(other_leaves)
    return treedef.unflatten([f(*xs) for xs in zip(*columns)])


def broadcast_prefix(prefix_tree, full_tree, is_leaf=None):
    """For each leaf of ``full_tree`` (flatten order), the leaf of ``prefix_tree`` covering it.

    Used for vmap's ``in_axes``/``out_axes`` (call with ``is_leaf=lambda x: x is None``). As in
    JAX, a list in the prefix also matches a tuple in the full tree. ``is_leaf`` applies to the
    prefix only.
    """
    out = []
    _broadcast(prefix_tree, full_tree, is_leaf, (), out, prefix_tree, full_tree)
    return out


def _broadcast(prefix, full, is_leaf, path, out, prefix_tree, full_tree):
    kind = _kind_of(prefix, is_leaf)
    if kind is _LEAF:
        out.extend([prefix] * len(leaves(full)))
        return
    children, aux = kind.flatten(prefix)
    full_kind = _kind_of(full, None)
    if full_kind is not _LEAF:
        full_children, full_aux = full_kind.flatten(full)
    if (full_kind is _LEAF or len(children) != len(full_children)
            or not (full_kind is kind and full_aux == aux
                    or kind is _LIST and full_kind is _TUPLE)):
        raise ValueError(
            f"{structure(prefix_tree, is_leaf)} is not a prefix of {structure(full_tree)}: at "
            f"path {path} the prefix has {structure(prefix, is_leaf)} but the tree has "
            f"{structure(full)}")
    for key, p, f in zip(kind.keys(aux, len(children)), children, full_children):
        _broadcast(p, f, is_leaf, path + (key,), out, prefix_tree, full_tree)


# -- registration ----------------------------------------------------------------------------

def _add_kind(cls, kind):
    if not isinstance(cls, type):
        raise TypeError(f"can only register a class, got {cls!r}")
    if cls in _BUILTIN or (issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise ValueError(f"{cls.__name__} is already a built-in pytree container")
    if _KINDS.get(cls, _LEAF) is not _LEAF:
        raise ValueError(f"{cls.__name__} is already registered as a pytree container")
    _KINDS[cls] = kind  # replaces a cached leaf entry


def register(cls, flatten_fn, unflatten_fn):
    """Make exact instances of ``cls`` containers.

    ``flatten_fn(value) -> (children, aux_data)`` and ``unflatten_fn(aux_data, children) ->
    value``; aux_data is static, must be hashable and is part of the TreeDef.
    """
    _add_kind(cls, _CustomKind(cls, flatten_fn, unflatten_fn))
    return cls


def register_dataclass(cls=None, data_fields=None, meta_fields=()):
    """Make exact instances of dataclass ``cls`` containers; returns ``cls``.

    Data fields are children; meta fields are static, hashable and part of the TreeDef. By
    default every ``__init__`` field not in ``meta_fields`` is a data field. Usable as a bare
    decorator, or as ``@register_dataclass(meta_fields=...)``.
    """
    if cls is None:
        return lambda c: register_dataclass(c, data_fields, meta_fields)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"register_dataclass needs a dataclass, got {cls!r}")
    order = tuple(f.name for f in dataclasses.fields(cls) if f.init)
    meta = _names(meta_fields)
    data = tuple(f for f in order if f not in meta) if data_fields is None else _names(data_fields)
    named = data + meta
    if len(set(named)) != len(named) or set(named) != set(order):
        raise ValueError(
            f"data_fields {data} and meta_fields {meta} of {cls.__name__} must name every "
            f"__init__ field {order} exactly once")
    _add_kind(cls, _DataclassKind(cls, data, meta, order))
    return cls


def _names(fields):
    return (fields,) if isinstance(fields, str) else tuple(fields)
