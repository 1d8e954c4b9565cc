"""Big models, readable: identical repeated siblings as one entry, and a depth limit.

Pure functions of a result's module tree. :func:`signatures` gives every module a small
int that is equal for two modules exactly when they are the same kind of module with the
same figures all the way down: type, ``extra_repr``, params, per-phase MACs, FLOPs and
calls, flags (not called, ignored, aliases) and, recursively, the same children under the
same names. Latency is left out: copies of a layer never take exactly the same time.

:func:`child_views` groups a module's children into :class:`View`\\ s: a run of
consecutive siblings with integer names (the items of an ``nn.Sequential`` or
``nn.ModuleList``) and the same signature becomes one view, ``(0-11): 12 x BertLayer``.
Inside a collapsed run each view stands for the corresponding module of every copy
(``encoder.layer.(0-11).attention``), so a renderer shows one copy's structure with the
figures of all of them.

>>> import torch, flopsight
>>> from torch import nn
>>> model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(3)), nn.Linear(4, 2))
>>> result = flopsight.profile(model, torch.ones(1, 4), clock=flopsight.FakeClock())
>>> views = child_views(result, root_view(result), signatures(result))
>>> [(v.key, v.count, v.path) for v in views]
[('0-2', 3, '(0-2)'), ('3', 1, '3')]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..result.profile_result import ProfileResult
from ..result.tree import ModuleNode

__all__ = ["View", "signatures", "subtree_sizes", "root_view", "child_views", "walk_views"]


@dataclass(frozen=True)
class View:
    """One entry of the module tree as a report shows it.

    ``nodes`` are every module the entry stands for: one module, or the copies of a
    collapsed run, or (inside a collapsed run) the corresponding module of each copy, in
    order. ``per`` is how many copies of the enclosing collapsed runs they span, so
    ``count = len(nodes) // per`` is how many siblings this entry collapses (1: none).
    ``key`` is its name under its parent (``"0-11"`` for a run, ``""`` for the root) and
    ``path`` its state_dict-style path with each run's range in parentheses.
    """

    key: str
    path: str
    nodes: tuple[ModuleNode, ...]
    per: int = 1

    @property
    def node(self) -> ModuleNode:
        """The first copy: what the entry's type, structure and extra_repr are read from."""
        return self.nodes[0]

    @property
    def count(self) -> int:
        """How many siblings this entry stands for (1 when nothing collapsed here)."""
        return len(self.nodes) // self.per

    @property
    def depth(self) -> int:
        return self.nodes[0].depth


def signatures(result: ProfileResult) -> dict[str, int]:
    """Module path -> an int, equal for two modules exactly when they are identical in
    everything a report shows but latency (see the module docstring).

    One post-order pass; each signature is interned as a flat tuple of its children's ints,
    so the whole tree costs linear time however deep it is.
    """
    interned: dict[tuple, int] = {}
    sig: dict[str, int] = {}
    for node in reversed(list(result.walk())):  # post-order: children first
        rec = node.record
        figures = tuple((phase, s.macs, s.flops, s.calls) for phase, s in node.inclusive.items())
        children = tuple((_key(rec.name, c), sig[c]) for c in rec.children)
        key = (rec.type_name, rec.extra_repr, rec.params, rec.params_trainable, node.ran, rec.ignored,
               rec.aliases, figures, children)
        sig[rec.name] = interned.setdefault(key, len(interned))
    return sig


def subtree_sizes(result: ProfileResult) -> dict[str, int]:
    """Module path -> how many modules lie below it (0 for a leaf).

    >>> import torch, flopsight
    >>> model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.ReLU()))
    >>> subtree_sizes(flopsight.profile(model, torch.ones(1), warm_up=0))
    {'0.1': 0, '0.0': 0, '0': 2, '': 3}
    """
    sizes: dict[str, int] = {}
    for node in reversed(list(result.walk())):
        sizes[node.name] = sum(sizes[c] + 1 for c in node.children)
    return sizes


def root_view(result: ProfileResult) -> View:
    """The whole model as a view."""
    return View("", "", (result.total,))


def _key(parent: str, child: str) -> str:
    """A child's name under its parent (the root's children are named by their path)."""
    return child.rpartition(".")[2] if parent else child


def _joinable(previous: tuple[str, int] | None, key: str, sig: int) -> bool:
    """True when a child (``key``, ``sig``) continues a run ending in ``previous``: the
    same signature and the next integer name. Named children (``q``, ``k``, ``v``) never
    collapse: their names say what each one is for, and a range could not name them."""
    return previous is not None and key.isdigit() and previous[0].isdigit() and int(key) == int(previous[0]) + 1 \
        and sig == previous[1]


def child_views(result: ProfileResult, view: View, sigs: dict[str, int] | None, *,
                collapse: bool = True) -> list[View]:
    """The children of ``view``, in order; with ``collapse`` (and ``sigs`` from
    :func:`signatures`), runs of identical siblings as one view each."""
    first = view.node
    if not first.children:
        return []
    # the children of every module the view stands for, position by position: the copies
    # are identical, so their children line up
    columns = [[result.module(c) for c in n.children] for n in view.nodes]
    runs: list[list[int]] = []  # indices of the children in each run
    previous: tuple[str, int] | None = None  # the last child's key and signature (None without sigs)
    for i, name in enumerate(first.children):
        key = _key(first.name, name)
        sig = sigs[name] if sigs is not None else None
        if collapse and sig is not None and _joinable(previous, key, sig):
            runs[-1].append(i)
        else:
            runs.append([i])
        previous = (key, sig) if sig is not None else None
    prefix = f"{view.path}." if view.path else ""
    views = []
    for run in runs:
        nodes = tuple(col[i] for i in run for col in columns)
        keys = [_key(first.name, first.children[i]) for i in run]
        key = keys[0] if len(run) == 1 else f"{keys[0]}-{keys[-1]}"
        path = prefix + (key if len(run) == 1 else f"({key})")
        views.append(View(key, path, nodes, per=len(view.nodes)))
    return views


def walk_views(result: ProfileResult, *, collapse: bool = False, max_depth: int | None = None) -> Iterator[View]:
    """Every view in pre-order, down to ``max_depth`` (None: all), with runs collapsed
    when ``collapse``. Iterative: a model's depth is no limit.

    >>> import torch, flopsight
    >>> model = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.ReLU()) for _ in range(4)))
    >>> result = flopsight.profile(model, torch.ones(1), warm_up=0)
    >>> [(v.path, v.count, len(v.nodes)) for v in walk_views(result, collapse=True)]
    [('', 1, 1), ('(0-3)', 4, 4), ('(0-3).0', 1, 4)]
    """
    sigs = signatures(result) if collapse else None
    stack = [root_view(result)]
    while stack:
        view = stack.pop()
        yield view
        if max_depth is None or view.depth < max_depth:
            stack.extend(reversed(child_views(result, view, sigs, collapse=collapse)))
