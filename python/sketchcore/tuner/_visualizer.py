"""``ModelVisualizer`` (Panther's name): a model's layer tree, to write selectors against and to
see what the tuner replaced — as text, or as a matplotlib figure (no graphviz)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from torch import nn

#: Class names of the sketched layers the tuner installs: a node of one of them was replaced.
SKETCHED = ("SKLinear", "LowRankLinear", "SKConv2d", "RandMultiHeadAttention")
#: Dense classes the tuner can replace (``LAYER_TYPE_MAPPING``).
REPLACEABLE = ("Linear", "Conv2d", "MultiheadAttention")


@dataclass
class _Node:
    name: str
    depth: int
    kind: str
    details: str
    parameters: int  # of the subtree
    buffers: int
    own: int  # parameters + buffers of the module itself (what its bar shows)
    has_children: bool
    prefix: str  # the tree-drawing characters before the name


def _details(module: nn.Module) -> str:
    """A layer's shape and sketch settings, in its own argument names."""
    get = lambda key: getattr(module, key, None)  # noqa: E731
    parts = []
    if get("in_features") is not None:
        parts.append(f"{get('in_features')}→{get('out_features')}")
    elif get("in_channels") is not None:
        kernel = get("kernel_size")
        parts.append(f"{get('in_channels')}→{get('out_channels')}" + (f", kernel {kernel[0]}×{kernel[1]}"
                                                                         if isinstance(kernel, tuple) else ""))
    elif get("embed_dim") is not None:
        parts.append(f"embed_dim={get('embed_dim')}, num_heads={get('num_heads')}")
    if type(module).__name__ in SKETCHED:
        for key in ("rank", "num_terms", "low_rank", "num_random_features", "kernel_fn"):
            if get(key) is not None:
                parts.append(f"{key}={get(key)}")
    return ", ".join(parts)


def _count(module: nn.Module, recurse: bool) -> tuple[int, int]:
    return (sum(p.numel() for p in module.parameters(recurse=recurse)),
            sum(b.numel() for b in module.buffers(recurse=recurse)))


def _nodes(model: nn.Module, root_name: str, max_depth: Optional[int]) -> list[_Node]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"ModelVisualizer: model: expected a torch.nn.Module, got {type(model).__name__}")
    nodes: list[_Node] = []

    def walk(name: str, module: nn.Module, depth: int, prefix: str, indent: str) -> None:
        parameters, buffers = _count(module, recurse=True)
        own = sum(_count(module, recurse=False))
        children = list(module.named_children())
        shown = children if max_depth is None or depth < max_depth else []
        nodes.append(_Node(name, depth, type(module).__name__, _details(module), parameters, buffers, own,
                           bool(children), prefix))
        for i, (child_name, child) in enumerate(shown):
            last = i == len(shown) - 1
            branch, below = ("└─ ", "   ") if last else ("├─ ", "│  ")
            walk(child_name, child, depth + 1, indent + branch, indent + below)

    walk(root_name, model, 0, "", "")
    return nodes


def _line(node: _Node) -> str:
    text = f"{node.prefix}{node.name} ({node.kind}){'/' if node.has_children else ''}"
    notes = [node.details] if node.details else []
    if node.parameters or node.buffers:
        notes.append(f"{node.parameters:,} params" + (f" + {node.buffers:,} buffers" if node.buffers else ""))
    if node.kind in SKETCHED:
        notes.append("[sketched]")
    return text + ("  " + " · ".join(notes) if notes else "")


class ModelVisualizer:
    """The layer tree of a model, to write ``LayerConfig`` selectors before tuning and to see what
    ``apply_best_params()`` replaced: each module's name, class, shape, parameters and buffers, and
    the settings of sketched layers, marked ``[sketched]``.

    Examples
    --------
    >>> from torch import nn
    >>> from sketchcore.torch import LowRankLinear
    >>> from sketchcore.tuner import ModelVisualizer
    >>> model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), LowRankLinear(32, 4, rank=2))
    >>> ModelVisualizer.print_module_tree(model)
    model (Sequential)/  620 params
    ├─ 0 (Linear)  16→32 · 544 params
    ├─ 1 (ReLU)
    └─ 2 (LowRankLinear)  32→4, rank=2 · 76 params · [sketched]
    """

    @staticmethod
    def module_tree(model: nn.Module, root_name: str = "model", max_depth: Optional[int] = None) -> str:
        """The tree as text, one line per module (see the class example).

        Parameters
        ----------
        model : torch.nn.Module
            The model.
        root_name : str, default "model"
            The name shown for the model itself.
        max_depth : int, optional
            Show modules down to this depth only (the model is depth 0); counts still cover
            everything below.

        Returns
        -------
        str
            The lines, joined by newlines.

        Raises
        ------
        TypeError
            ``"ModelVisualizer: model: expected a torch.nn.Module, got ..."``."""
        return "\n".join(_line(node) for node in _nodes(model, root_name, max_depth))

    @staticmethod
    def print_module_tree(model: nn.Module, root_name: str = "model", max_depth: Optional[int] = None) -> None:
        """Prints :meth:`module_tree` (Panther's method; same arguments and errors)."""
        print(ModelVisualizer.module_tree(model, root_name, max_depth))

    @staticmethod
    def plot_module_tree(model: nn.Module, root_name: str = "model", max_depth: Optional[int] = None,
                         ax: Any = None) -> Any:
        """Draws the tree with matplotlib, a bar per module of the numbers it stores (sketched and
        replaceable layers colored) on ``ax`` (default a new figure, not shown); other arguments as
        :meth:`module_tree`. Returns the figure; ImportError without matplotlib."""
        try:
            from matplotlib.figure import Figure
        except ImportError:
            raise ImportError("ModelVisualizer.plot_module_tree needs matplotlib, an optional dependency: "
                              "pip install matplotlib") from None
        nodes = _nodes(model, root_name, max_depth)
        if ax is None:
            figure = Figure(figsize=(12, 0.28 * len(nodes) + 0.8))
            ax = figure.add_subplot()
        largest = max([node.own for node in nodes] + [1])
        for row, node in enumerate(nodes):
            y = len(nodes) - 1 - row
            color = "tab:green" if node.kind in SKETCHED else "tab:blue" if node.kind in REPLACEABLE else "0.6"
            ax.text(0.0, y, _line(node), va="center", ha="left", family="monospace", fontsize=8,
                    color="black" if node.kind not in SKETCHED else "darkgreen")
            if node.own:
                ax.barh(y, 0.3 * node.own / largest, left=1.05, height=0.6, color=color)
        ax.set_xlim(0.0, 1.4)
        ax.set_ylim(-1, len(nodes))
        ax.axis("off")
        ax.set_title(f"{root_name}: numbers stored per module (green: sketched, blue: replaceable dense)", fontsize=9)
        return ax.figure
