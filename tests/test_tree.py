"""Tests for qb.tree (spec 004 §6.1)."""

import collections
import copy
import dataclasses
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import quabla as qb


class Point(NamedTuple):
    x: object
    y: object


@qb.tree.register_dataclass
@dataclasses.dataclass(frozen=True)
class Layer:
    w: object
    b: object


@dataclasses.dataclass(frozen=True)
class Mlp:
    layers: list
    activation: str


qb.tree.register_dataclass(Mlp, data_fields=("layers",), meta_fields=("activation",))


@qb.tree.register_dataclass(meta_fields=("tag",))
@dataclasses.dataclass
class Cell:
    left: object
    right: object
    tag: str


class Interval:
    def __init__(self, lo, hi, closed=True):
        self.lo, self.hi, self.closed = lo, hi, closed


qb.tree.register(Interval, lambda v: ((v.lo, v.hi), v.closed),
                 lambda closed, children: Interval(*children, closed=closed))


def make_model(activation="tanh"):
    return Mlp([Layer(qb.zeros((2, 8)), qb.zeros((8,))), Layer(qb.zeros((8, 1)), qb.zeros((1,)))],
               activation)


# -- spec examples ---------------------------------------------------------------------------

def test_spec_flatten_print(capsys):
    leaves, treedef = qb.tree.flatten({"b": 1.0, "a": [qb.zeros((2,)), None]})
    print(len(leaves), treedef)
    assert capsys.readouterr().out == "2 TreeDef({'a': [*, None], 'b': *})\n"
    assert leaves[0].tolist() == [0.0, 0.0] and leaves[1] == 1.0


def test_spec_flatten_with_path_of_model():
    paths = [path for path, _ in qb.tree.flatten_with_path(make_model())[0]]
    assert paths == [('layers', 0, 'w'), ('layers', 0, 'b'), ('layers', 1, 'w'), ('layers', 1, 'b')]


def test_spec_map_floats(capsys):
    print(qb.tree.map(lambda a, b: a + b, {"a": 1.0}, {"a": 2.0}))
    assert capsys.readouterr().out == "{'a': 3.0}\n"


def test_spec_map_tensors(capsys):
    print(qb.tree.map(lambda a, b: a + b, {"a": qb.array(1.0)}, {"a": qb.array(2.0)}))
    assert capsys.readouterr().out == "{'a': Tensor(3., dtype=float64)}\n"


def test_model_rebuilds_registered_types():
    out = qb.tree.map(lambda x: x, make_model())
    assert (type(out).__name__, type(out.layers[0]).__name__, out.activation) == ("Mlp", "Layer", "tanh")
    assert str(qb.tree.structure(out)) == (
        "TreeDef(Mlp(layers=[Layer(w=*, b=*), Layer(w=*, b=*)], activation='tanh'))")


# -- containers and leaves -------------------------------------------------------------------

def test_none_is_an_empty_container():
    assert qb.tree.leaves([None, 1, (None,)]) == [1]
    assert qb.tree.structure(None).num_leaves == 0
    assert qb.tree.map(lambda x: x * 10, {"a": None, "b": 2}) == {"a": None, "b": 20}


def test_leaves_of_various_types():
    t, arr, shape = qb.zeros((2, 3)), np.ones(2), qb.zeros((2, 3)).shape
    leaves = qb.tree.leaves([t, arr, 1, 2.5, "s", True, shape, object])
    assert leaves[0] is t and leaves[1] is arr and leaves[2:6] == [1, 2.5, "s", True]
    assert leaves[6] is shape  # a tuple subclass that is not a NamedTuple is a leaf, as in JAX
    assert leaves[7] is object
    assert str(qb.tree.structure(t)) == "TreeDef(*)" and qb.tree.structure(t).node_type is None


def test_tuple_prints():
    assert str(qb.tree.structure((1,))) == "TreeDef((*,))"
    assert str(qb.tree.structure((1, 2))) == "TreeDef((*, *))"
    assert str(qb.tree.structure(())) == "TreeDef(())"
    assert str(qb.tree.structure([])) == "TreeDef([])"
    assert str(qb.tree.structure({})) == "TreeDef({})"


def test_namedtuple_rebuilds_same_class():
    out = qb.tree.map(lambda v: v + 1, Point(1, [2, 3]))
    assert type(out) is Point and out == Point(2, [3, 4])
    assert str(qb.tree.structure(Point(1, 2))) == "TreeDef(Point(x=*, y=*))"
    assert qb.tree.structure(Point(1, 2)) != qb.tree.structure((1, 2))


def test_int_dict_keys_sorted():
    leaves, treedef = qb.tree.flatten({10: "c", 2: "b", 1: "a"})
    assert leaves == ["a", "b", "c"]
    assert str(treedef) == "TreeDef({1: *, 2: *, 10: *})"
    assert treedef.unflatten(["x", "y", "z"]) == {1: "x", 2: "y", 10: "z"}


def test_mixed_dict_keys_rejected():
    with pytest.raises(TypeError, match="mutually sortable"):
        qb.tree.flatten({"a": 1, 1: 2})


@pytest.mark.parametrize("value, hint", [
    (collections.OrderedDict(a=1), "plain dict"),
    (collections.defaultdict(list), "plain dict"),
    (type("MyList", (list,), {})([1]), "plain list"),
])
def test_container_subclasses_rejected(value, hint):
    with pytest.raises(TypeError, match=hint):
        qb.tree.flatten({"x": value})


def test_unregistered_dataclass_rejected():
    @dataclasses.dataclass
    class Loose:
        a: int

    with pytest.raises(TypeError, match="register_dataclass"):
        qb.tree.flatten([Loose(1)])
    assert qb.tree.leaves([Loose]) == [Loose]  # the class itself is an ordinary leaf


def test_subclass_of_registered_dataclass_is_not_a_container():
    @dataclasses.dataclass(frozen=True)
    class SubLayer(Layer):
        pass

    with pytest.raises(TypeError, match="SubLayer"):
        qb.tree.flatten(SubLayer(1, 2))


def test_is_leaf_stops_descent():
    leaves, treedef = qb.tree.flatten({"a": [1, 2], "b": None}, is_leaf=lambda x: isinstance(x, list) or x is None)
    assert leaves == [[1, 2], None] and treedef.num_leaves == 2


# -- registration ----------------------------------------------------------------------------

def test_post_init_reruns_and_frozen_works():
    calls = []

    @qb.tree.register_dataclass
    @dataclasses.dataclass(frozen=True)
    class Checked:
        a: object

        def __post_init__(self):
            calls.append(self.a)

    out = qb.tree.map(lambda v: v * 2, Checked(3))
    assert out == Checked(6) and calls == [3, 6, 6]


def test_meta_fields_are_part_of_treedef():
    tanh, tanh2, relu = (qb.tree.structure(make_model(a)) for a in ("tanh", "tanh", "relu"))
    assert tanh == tanh2 and hash(tanh) == hash(tanh2)
    assert tanh != relu
    assert "activation='relu'" in str(relu)


def test_unhashable_meta_rejected_at_flatten():
    with pytest.raises(TypeError, match="Mlp.activation .*hashable"):
        qb.tree.flatten(Mlp([], ["tanh"]))


def test_register_dataclass_fields():
    @dataclasses.dataclass
    class Three:
        a: object
        b: object
        c: object = 0
        d: object = dataclasses.field(init=False, default=0)

    bad = [dict(data_fields=("a", "b")), dict(data_fields=("a", "b", "c", "e")),
           dict(data_fields=("a", "b", "c"), meta_fields=("c",)), dict(meta_fields=("d",)),
           dict(data_fields=("a", "a", "b", "c"))]
    for kwargs in bad:
        with pytest.raises(ValueError, match="exactly once"):
            qb.tree.register_dataclass(Three, **kwargs)
    assert qb.tree.register_dataclass(Three, data_fields=("c", "a"), meta_fields="b") is Three
    flat = qb.tree.flatten_with_path(Three(1, "m", 3))[0]
    assert flat == [(("c",), 3), (("a",), 1)]
    assert str(qb.tree.structure(Three(1, "m", 3))) == "TreeDef(Three(a=*, b='m', c=*))"


def test_register_rejections():
    with pytest.raises(TypeError, match="dataclass"):
        qb.tree.register_dataclass(Interval)
    for builtin in (dict, list, tuple, type(None), Point):
        with pytest.raises(ValueError, match="built-in"):
            qb.tree.register(builtin, lambda v: ((), None), lambda a, c: None)
    with pytest.raises(ValueError, match="already registered"):
        qb.tree.register_dataclass(Layer)
    with pytest.raises(ValueError, match="already registered"):
        qb.tree.register(Layer, lambda v: ((), None), lambda a, c: None)
    with pytest.raises(ValueError, match="already registered"):
        qb.tree.register(Interval, lambda v: ((), None), lambda a, c: None)


def test_register_leaf_type_after_use_and_subclass_of_dict():
    class Bag(dict):
        pass

    with pytest.raises(TypeError):
        qb.tree.flatten(Bag(a=1))
    qb.tree.register(Bag, lambda b: (list(b.values()), tuple(b)), lambda k, c: Bag(zip(k, c)))
    out = qb.tree.map(lambda v: v + 1, Bag(a=1, b=2))
    assert type(out) is Bag and out == {"a": 2, "b": 3}


def test_custom_register():
    leaves, treedef = qb.tree.flatten([Interval(1.0, 2.0, closed=False)])
    assert leaves == [1.0, 2.0] and str(treedef) == "TreeDef([Interval[False](*, *)])"
    out = treedef.unflatten([5, 6])[0]
    assert (type(out), out.lo, out.hi, out.closed) == (Interval, 5, 6, False)
    assert [p for p, _ in qb.tree.flatten_with_path(Interval(1, 2))[0]] == [(0,), (1,)]
    assert treedef != qb.tree.structure([Interval(1.0, 2.0)])


# -- TreeDef and map -------------------------------------------------------------------------

def test_treedef_api():
    treedef = qb.tree.structure({"a": [1, None], "b": Point(2, 3)})
    assert treedef.num_leaves == 3 and treedef.node_type is dict
    assert [str(c) for c in treedef.children()] == ["TreeDef([*, None])", "TreeDef(Point(x=*, y=*))"]
    assert [c.num_leaves for c in treedef.children()] == [1, 2]
    assert qb.tree.unflatten(treedef, "xyz") == {"a": ["x", None], "b": Point("y", "z")}
    with pytest.raises(ValueError, match="3 leaves, got 2"):
        treedef.unflatten([1, 2])
    with pytest.raises(AttributeError):
        treedef.num_leaves = 4
    assert copy.deepcopy(treedef) is treedef
    assert treedef != "TreeDef" and len({treedef, qb.tree.structure({"a": [0, None], "b": Point(0, 0)})}) == 1


def test_map_structure_mismatch():
    with pytest.raises(ValueError, match=r"TreeDef\(\[\*, \*\]\) vs TreeDef\(\(\*, \*\)\)"):
        qb.tree.map(lambda a, b: a, [1, 2], (1, 2))


def test_map_over_several_trees():
    assert qb.tree.map(lambda a, b, c: a + b + c, [1, {"k": 2}], [10, {"k": 20}], [100, {"k": 200}]) == \
        [111, {"k": 222}]


# -- broadcast_prefix ------------------------------------------------------------------------

def is_none(x):
    return x is None


def test_broadcast_prefix_in_axes():
    args = (Point(qb.zeros((3,)), qb.zeros((2,))), [1.0, {"u": 2.0, "v": 3.0}])
    assert qb.tree.broadcast_prefix((Point(0, None), 1), args, is_leaf=is_none) == [0, None, 1, 1, 1]
    assert qb.tree.broadcast_prefix(None, args, is_leaf=is_none) == [None] * 5
    assert qb.tree.broadcast_prefix([0, [None, 0]], args, is_leaf=is_none) == [0, 0, None, 0, 0]


def test_broadcast_prefix_list_matches_tuple_only():
    assert qb.tree.broadcast_prefix([0, 1], (7, 8)) == [0, 1]
    with pytest.raises(ValueError, match="not a prefix"):
        qb.tree.broadcast_prefix((0, 1), [7, 8])


@pytest.mark.parametrize("prefix, full", [
    ((0, 1), (7, 8, 9)), ({"a": 0}, {"b": 1}), ([0], 5), (Point(0, 1), (1, 2)),
])
def test_broadcast_prefix_mismatch(prefix, full):
    with pytest.raises(ValueError, match="not a prefix"):
        qb.tree.broadcast_prefix(prefix, full)


# -- property-based --------------------------------------------------------------------------

TENSORS = [qb.zeros((2,)), qb.array(1.0)]
leaf_values = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=3),
                        st.sampled_from(TENSORS))


def _containers(children):
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), children, max_size=3),
        st.dictionaries(st.integers(-5, 5), children, max_size=3),
        st.builds(Point, children, children),
        st.builds(Cell, children, children, st.sampled_from(["relu", "tanh"])),
    )


trees = st.recursive(st.one_of(leaf_values, st.none()), _containers, max_leaves=12)


def _index(tree, path):
    for key in path:
        tree = getattr(tree, key) if isinstance(key, str) and not isinstance(tree, dict) else tree[key]
    return tree


@settings(max_examples=300, deadline=None)
@given(trees)
def test_round_trip_and_paths(tree):
    leaves, treedef = qb.tree.flatten(tree)
    assert treedef.num_leaves == len(leaves)
    assert qb.tree.unflatten(treedef, leaves) == tree
    rebuilt = treedef.unflatten(list(range(len(leaves))))
    assert qb.tree.leaves(rebuilt) == list(range(len(leaves)))
    assert qb.tree.structure(rebuilt) == treedef and hash(qb.tree.structure(rebuilt)) == hash(treedef)

    with_path, treedef2 = qb.tree.flatten_with_path(tree)
    assert treedef2 == treedef and len({p for p, _ in with_path}) == len(with_path)
    for (path, leaf), expected in zip(with_path, leaves, strict=True):
        assert leaf is expected and _index(tree, path) is leaf

    assert qb.tree.broadcast_prefix(tree, tree) == leaves
    assert qb.tree.broadcast_prefix(0, tree) == [0] * len(leaves)


@settings(max_examples=300, deadline=None)
@given(trees, trees)
def test_structure_equality_matches_printed_structure(a, b):
    sa, sb = qb.tree.structure(a), qb.tree.structure(b)
    assert (sa == sb) == (str(sa) == str(sb))
    if sa == sb:
        assert hash(sa) == hash(sb)
        assert qb.tree.map(lambda x, y: y, a, b) == b
    else:
        with pytest.raises(ValueError):
            qb.tree.map(lambda x, y: y, a, b)
