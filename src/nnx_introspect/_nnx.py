"""The one place that touches version-sensitive Flax NNX behaviour.

Everything here has a public-API fallback, and ``tests/test_nnx.py`` proves the
two paths give the same answer. Other modules import from here instead of
reaching into ``flax.nnx`` internals themselves.
"""

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
import numpy as np
from flax import nnx

from nnx_introspect._typing import check_filters

T = TypeVar("T")

__all__ = [
    "FrozenParam",
    "abstract_build",
    "abstract_build_public",
    "annotated_variable",
    "build_without_mesh",
    "devices_present",
    "flat_state",
    "flat_state_public",
    "gc_paused",
    "iter_modules",
    "iter_modules_public",
    "iter_variable_leaves",
    "keypath_keys",
    "select_state",
    "variable_sharding",
]

Path = tuple[Any, ...]


def select_state(
    target: nnx.Pytree | nnx.State[Any, Any], filters: tuple[Any, ...]
) -> nnx.State[Any, Any]:
    """The state of ``target`` restricted to the variables matching any filter.

    No filter means every variable. Several filters mean their union (unlike
    ``nnx.state(node, f1, f2)``, which returns one state per filter). Shared
    variables appear once, as ``nnx.state`` gives them. Never mutates ``target``.
    Every filter is validated first (:func:`~nnx_introspect._typing.check_filters`),
    so a bad one raises a ``TypeError`` naming ``filters[i]`` instead of reaching
    flax's own (broken) error message.
    """
    check_filters(filters)
    flt: Any = (
        ... if not filters else (filters[0] if len(filters) == 1 else nnx.Any(*filters))
    )
    if isinstance(target, nnx.State):
        if flt is ...:
            return target
        return nnx.filter_state(target, flt)
    return nnx.state(target, flt)


def flat_state(state: nnx.State[Any, Any]) -> list[tuple[Path, Any]]:
    """``(path, variable_or_array)`` pairs of ``state`` in ``jax.tree.leaves`` order.

    Uses ``nnx.to_flat_state`` (sorted, like the state's pytree flattening); falls
    back to :func:`flat_state_public` where it is missing.
    """
    to_flat = getattr(nnx, "to_flat_state", None)
    if to_flat is None:  # pragma: no cover - older/newer flax without it
        return flat_state_public(state)
    return [(tuple(path), leaf) for path, leaf in to_flat(state)]


def flat_state_public(state: nnx.State[Any, Any]) -> list[tuple[Path, Any]]:
    """The fallback for :func:`flat_state`, using only ``jax.tree_util``."""
    pairs, _ = jax.tree_util.tree_flatten_with_path(
        state, is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    return [(keypath_keys(keypath), leaf) for keypath, leaf in pairs]


def keypath_keys(keypath: Any) -> Path:
    """The plain keys of a ``jax.tree_util`` key path (``DictKey('a')`` -> ``'a'``)."""
    return tuple(_key(entry) for entry in keypath)


def _key(entry: Any) -> Any:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return entry  # pragma: no cover


def variable_sharding(variable: Any) -> Any:
    """The NNX sharding annotation of ``variable`` (``out_sharding``), or ``None``.

    Flax 0.12 stores it as ``out_sharding`` metadata; older releases used
    ``sharding_names`` / ``sharding``. Reads metadata without touching values.
    """
    if not isinstance(variable, nnx.Variable):
        return None
    metadata = _metadata(variable)
    for name in ("out_sharding", "sharding_names", "sharding"):
        value = metadata.get(name)
        if value is not None:
            return value
    return None


class FrozenParam(nnx.Param):  # type: ignore[type-arg]
    """A parameter a LoRA step leaves frozen: no gradient, no optimizer state.

    Still an ``nnx.Param`` (counted among the parameters); the step's
    differentiation filter and the plan's optimizer leaves leave it out.
    """


def annotated_variable(kind: type, value: Any, names: Any) -> Any:
    """``kind(value)`` annotated with the sharding ``names`` (or none), lazily.

    The annotation is metadata for mesh planning: no mesh is needed (flax's
    eager sharding is off while the variable is made, where flax has it).
    """
    if names is None:
        return kind(value)
    lazy = getattr(nnx, "use_eager_sharding", None)
    if lazy is None:  # pragma: no cover - flax before eager sharding
        return kind(value, sharding_names=names)
    with lazy(False):
        return kind(value, out_sharding=names)


def _metadata(variable: nnx.Variable[Any]) -> dict[str, Any]:
    get = getattr(variable, "get_metadata", None)
    if get is not None:
        meta = get()
        if isinstance(meta, dict):
            return meta
    return dict(getattr(variable, "_var_metadata", {}))  # pragma: no cover


def iter_variable_leaves(leaf: Any) -> Iterator[tuple[Path, Any]]:
    """The array leaves held by one flat-state entry, with sub-paths.

    A variable normally holds one array (sub-path ``()``); a raw array is its own
    leaf. Reading goes through ``jax.tree_util`` so nothing is copied or mutated.
    """
    pairs, _ = jax.tree_util.tree_flatten_with_path(leaf)
    is_variable = isinstance(leaf, nnx.Variable)
    for keypath, value in pairs:
        sub = keypath_keys(keypath)
        if is_variable and sub[:1] == ("value",):
            sub = sub[1:]
        yield sub, value


def iter_modules(target: Any) -> list[tuple[Path, nnx.Module]]:
    """Every ``nnx.Module`` of ``target``'s graph with its path; shared ones once.

    ``nnx.iter_graph``'s order and paths (the paths ``nnx.state`` gives the
    modules' variables); :func:`iter_modules_public` where flax lacks it. An
    ``nnx.State`` (or anything not a graph node) holds no module: ``[]``.
    """
    if isinstance(target, nnx.State) or not isinstance(target, nnx.Pytree):
        return []
    walk = getattr(nnx, "iter_graph", None)
    if walk is None:  # pragma: no cover - flax without iter_graph
        return iter_modules_public(target)
    return [(tuple(p), n) for p, n in walk(target) if isinstance(n, nnx.Module)]


def iter_modules_public(target: Any) -> list[tuple[Path, nnx.Module]]:
    """The fallback for :func:`iter_modules`: a walk of the modules' attributes.

    Attributes (``vars``) in sorted order, into modules, ``nnx.List`` and
    ``nnx.Dict`` containers, lists, tuples and dicts; children before their
    parent, as ``nnx.iter_graph`` yields them.
    """
    if isinstance(target, nnx.State) or not isinstance(target, nnx.Pytree):
        return []
    seen: set[int] = set()
    out: list[tuple[Path, nnx.Module]] = []

    def visit(node: Any, path: Path) -> None:
        if isinstance(node, nnx.Variable) or id(node) in seen:
            return
        if isinstance(node, list | tuple):
            items: list[tuple[Any, Any]] = list(enumerate(node))
        elif isinstance(node, dict):
            items = sorted(node.items(), key=lambda kv: str(kv[0]))
        elif isinstance(node, nnx.Pytree):
            seen.add(id(node))
            items = sorted(
                ((k, v) for k, v in vars(node).items() if not k.startswith("_")),
                key=lambda kv: str(kv[0]),
            )
            if type(node).__name__ in ("List", "Dict"):  # nnx.List / nnx.Dict
                items = [(_container_key(k), v) for k, v in items]
        else:
            return
        for key, child in items:
            visit(child, (*path, key))
        if isinstance(node, nnx.Module):
            out.append((path, node))

    visit(target, ())
    return out


def _container_key(key: Any) -> Any:
    return int(key) if isinstance(key, str) and key.isdecimal() else key


# --- Abstract builds -------------------------------------------------------------
#
# ``nnx.eval_shape(lambda: factory(nnx.Rngs(seed)))`` costs time quadratic in the
# number of RNG draws: every draw runs ``self.count[...] += 1``, and flax's
# ``Variable.set_value`` then compares ``getattr(value, "sharding", None)`` of the
# new and old counter. Under tracing the counter is a tracer, whose ``.sharding``
# raises an AttributeError whose message (``_origin_msg``) walks every equation
# traced so far. The avoidance below patches nothing: before the factory runs, each
# stream's ``RngCount`` is given a NumPy counter through the public
# ``Variable.set_value``. Counting then stays in NumPy (no tracer, no ``.sharding``
# lookup), while keys are still derived by ``jax.random.fold_in`` under the trace.
# Keys, shapes, dtypes and metadata are unchanged; ``tests/test_abstract.py``
# proves the result equal to :func:`abstract_build_public` for every example model.
#
# The counter must hand out copies (:class:`_CountBuffer`). Flax draws a key as
# ``fold_in(key, self.count[...])`` then ``self.count[...] += 1``: on a plain NumPy
# array ``[...]`` is a *view*, ``+=`` increments it in place and ``set_value``
# writes ``raw[...] = value`` in place too. JAX's CPU backend wraps a 64-byte
# aligned host buffer without copying, and runs ``fold_in`` asynchronously; when
# the allocator happened to align the counter, the queued ``fold_in`` could read
# the counter after the increment and fold in ``n + 1`` (or later) instead of
# ``n``: keys depended on malloc alignment and thread timing. That was the cause of
# the intermittent ``test_numpy_counters_draw_the_same_keys`` failure.
#
# The second superlinear cost is Python's cyclic garbage collector: a build
# allocates many short-lived objects, each full collection walks every object the
# trace holds so far, so collections cost more the larger the model. The fast path
# pauses the collector for the build and restores it in ``finally`` (reference
# counting still frees everything acyclic meanwhile).

_MESH_REQUIRED = "mesh context or metadata is required"


class _CountBuffer(np.ndarray):
    """A NumPy RNG counter whose item reads are copies, never views of itself.

    JAX only ever receives the copy, so flax's in-place increment of the counter
    cannot change a value JAX may still be reading asynchronously.
    """

    def __getitem__(self, key: Any) -> Any:
        return np.array(np.asarray(self)[key])


def _numpy_counters(rngs: nnx.Rngs) -> bool:
    """Give every ``RngCount`` of ``rngs`` a NumPy counter; ``False`` if impossible."""
    count_type = getattr(nnx, "RngCount", None)
    iter_graph = getattr(nnx, "iter_graph", None)
    if count_type is None or iter_graph is None:  # pragma: no cover - other flax
        return False
    counters = [n for _, n in iter_graph(rngs) if isinstance(n, count_type)]
    for counter in counters:
        shape = tuple(int(d) for d in counter.shape)
        counter.set_value(np.zeros(shape, np.uint32).view(_CountBuffer))
        if not isinstance(counter.get_value(), np.ndarray):  # pragma: no cover
            return False
    return bool(counters)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector; restore its previous state on exit."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _eval_shape(factory: Callable[[nnx.Rngs], Any], seed: int, fast: bool) -> Any:
    def build() -> Any:
        rngs = nnx.Rngs(seed)
        if fast and not _numpy_counters(rngs):  # pragma: no cover - other flax
            rngs = nnx.Rngs(seed)
        return factory(rngs)

    if not fast:
        return nnx.eval_shape(build)
    with gc_paused():
        return nnx.eval_shape(build)


def _no_mesh() -> bool:
    return bool(jax.sharding.get_abstract_mesh().empty)


def build_without_mesh(build: Callable[[], T]) -> T:
    """``build()``; for a model annotated with shardings, also with no mesh set.

    Variables annotated with ``out_sharding`` (``nnx.with_partitioning``) need a
    mesh under flax's eager sharding. With no mesh there is nothing to shard
    over: ``build`` runs again with eager sharding off (flax's public, restoring
    ``nnx.use_eager_sharding(False)``), which keeps the annotations as metadata
    for mesh planning; the values the seed draws do not depend on them. Only
    when flax refused and no mesh is active, so any other model builds once.
    """
    try:
        return build()
    except ValueError as error:
        lazy = getattr(nnx, "use_eager_sharding", None)
        if lazy is None or _MESH_REQUIRED not in str(error) or not _no_mesh():
            raise
    with lazy(False):
        return build()


def _build(factory: Callable[[nnx.Rngs], Any], seed: int, fast: bool) -> Any:
    return build_without_mesh(lambda: _eval_shape(factory, seed, fast))


def abstract_build(factory: Callable[[nnx.Rngs], Any], seed: int) -> Any:
    """``factory(nnx.Rngs(seed))`` built abstractly, in time linear in its size.

    Leaves are ``jax.ShapeDtypeStruct``; nothing is allocated and no forward pass
    runs. Same result as :func:`abstract_build_public` (plain ``nnx.eval_shape``)
    without its quadratic cost; models annotated with ``out_sharding`` also build
    when no mesh is set.
    """
    return _build(factory, seed, fast=True)


def abstract_build_public(factory: Callable[[nnx.Rngs], Any], seed: int) -> Any:
    """The fallback for :func:`abstract_build`: plain ``nnx.eval_shape``."""
    return _build(factory, seed, fast=False)


def devices_present() -> int | None:
    """``jax.device_count()`` when a JAX backend is already started, else ``None``.

    Asking for the devices starts JAX's backends, and with a PJRT plugin
    installed on a machine without its device (the CUDA plugin, libtpu) that
    start writes the plugin's errors to stderr. A plan needs no backend, so
    it asks only when one is running. ``jax._src.xla_bridge`` is private: where
    it lacks ``backends_are_initialized``, the public ``jax.device_count()``
    answers (starting the backends).
    """
    try:
        from jax._src import xla_bridge

        started = bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # pragma: no cover - another jax
        return int(jax.device_count())
    return int(jax.device_count()) if started else None
