"""Pytrees: nested tuples / lists / dicts with array-like leaves, as the transforms
(func.py) and checkpoint (custom.py) take and return them."""

# Other kinds of node: (test, children, rebuild) -- ``children(node)`` lists what it is
# made of, ``rebuild(*children)`` makes one again. complex_numbers/ registers complex
# values: one real leaf, their parts side by side.
NODES = []
NODE = "node"


def register_node(test, children, rebuild):
    """Make values for which ``test`` holds pytree nodes (jax's register_pytree_node)."""
    NODES.append((test, children, rebuild))


def flatten(tree):
    """(leaves, rebuild): the leaves of a nested tuple / list / dict, left to right, and
    a ``Structure`` that puts a list of new leaves back in the same structure."""
    if isinstance(tree, (tuple, list)):
        parts = [flatten(t) for t in tree]
        kind, keys = type(tree), None
    elif isinstance(tree, dict):
        keys = list(tree)
        parts = [flatten(tree[k]) for k in keys]
        kind = dict
    else:
        for test, children, rebuild in NODES:
            if test(tree):
                parts = [flatten(t) for t in children(tree)]
                kind, keys = rebuild, NODE
                break
        else:
            return [tree], LEAF
    leaves = [leaf for p in parts for leaf in p[0]]
    return leaves, Structure(kind, keys, [p[1] for p in parts], [len(p[0]) for p in parts])


class Structure:
    """A nested tuple / list / dict shape, as data (it pickles with a compiled
    function): called with leaves, it builds that structure around them."""
    __slots__ = ("kind", "keys", "children", "sizes")

    def __init__(self, kind, keys, children, sizes):
        self.kind, self.keys, self.children, self.sizes = kind, keys, children, sizes

    def __call__(self, leaves):
        if self.kind is None:
            return leaves[0]
        out, start = [], 0
        for child, n in zip(self.children, self.sizes):
            out.append(child(leaves[start:start + n]))
            start += n
        if self.keys is NODE:
            return self.kind(*out)
        return dict(zip(self.keys, out)) if self.kind is dict else self.kind(out)

    def __getstate__(self):
        return (self.kind, self.keys, self.children, self.sizes)

    def __setstate__(self, state):
        self.kind, self.keys, self.children, self.sizes = state


LEAF = Structure(None, None, [], [])
