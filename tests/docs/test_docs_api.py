"""The API reference lists every public member: docs/api/tuner.md has an entry for every name of
``sketchcore.tuner`` (and of Panther's module layout under it), lists every public method and
property of each class — those of the mixins and base classes included — and every instance
attribute and dataclass field is documented in the class docstrings it renders; docs/api/torch.md
lists every field of ``LayerReport``. Sphinx (``-W``, in CI) then fails on any listed name that
does not exist."""
import dataclasses
import importlib
import inspect
import pathlib
import pkgutil
import re

import pytest

torch = pytest.importorskip("torch")
import sketchcore.tuner as tuner  # noqa: E402

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api"
_DIRECTIVE = re.compile(r"^\.\. (autoclass|autofunction|autodata|py:data|automodule):: (\S+)")


def directives(page, root=DOCS):
    """{target: {"kind": ..., "members": [...], "options": {...}}} of a page's eval-rst blocks."""
    found, current, option = {}, None, None
    for line in (root / page).read_text(encoding="utf-8").splitlines():
        match = _DIRECTIVE.match(line)
        if match:
            current = found.setdefault(match.group(2), {"kind": match.group(1), "members": [], "options": set()})
            option = None
        elif current is not None and re.match(r"^   :[\w-]+:", line):
            option, _, value = line.strip()[1:].partition(":")
            current["options"].add(option)
            if option == "members":
                current["members"] += [m.strip() for m in value.split(",") if m.strip()]
        elif current is not None and option == "members" and line.startswith(" " * 6) and line.strip():
            current["members"] += [m.strip() for m in line.split(",") if m.strip()]
        elif not line.startswith("   "):
            current = option = None if line.strip() else current
    return found


def documented_names(cls):
    """Names the numpy-style docstrings of ``cls`` and its bases give in Parameters/Attributes."""
    names = set()
    for klass in cls.__mro__[:-1]:
        section = None
        lines = inspect.cleandoc(klass.__doc__ or "").splitlines()
        for i, line in enumerate(lines):
            if i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}:
                section = line.strip()
            elif section in ("Parameters", "Attributes") and line and not line.startswith(" "):
                names.update(name.strip() for name in line.split(" : ")[0].split(","))
    return names


def public_members(cls):
    """Methods, properties and class attributes a user reaches on ``cls`` (inherited ones too)."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return {name for name in dir(cls) if not name.startswith("_") and name not in dir(object)} - fields


def test_every_name_of_sketchcore_tuner_has_an_entry():
    entries = directives("tuner.md")
    for name in tuner.__all__:
        assert f"sketchcore.tuner.{name}" in entries or name in entries, f"{name} is not on docs/api/tuner.md"


@pytest.mark.parametrize("name", [n for n in tuner.__all__ if inspect.isclass(getattr(tuner, n))])
def test_every_public_member_of_each_class_is_listed(name):
    cls = getattr(tuner, name)
    entry = directives("tuner.md")[f"sketchcore.tuner.{name}"]
    assert set(entry["members"]) == public_members(cls), f"{name}: listed {entry['members']}"
    inherited = {m for m in public_members(cls) if m not in vars(cls)}
    if inherited:  # autodoc leaves out inherited members (the tuner's mixins) without this option
        assert "inherited-members" in entry["options"], f"{name} inherits {sorted(inherited)}"


def _instances():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    fitted = tuner.SKAutoTuner(model, tuner.LayerConfig("0", {"rank": [2]}), lambda m: 1.0, accuracy_threshold=0.5)
    fitted.tune()
    searches = [tuner.GridSearch(), tuner.RandomSearch(), tuner.SearchAlgorithm()]
    try:
        searches.append(tuner.OptunaSearch(n_trials=1))
    except ImportError:
        pass
    for search in searches:
        search.initialize({"rank": [2]})
    return [fitted, *searches, tuner.SpectralSearch(), tuner.LayerConfig("0"), tuner.TuningConfigs([]),
            tuner.LayerNameResolver(model), tuner.ParamsResolver(model), tuner.Int(1, 2), tuner.Float(0.0, 1.0),
            tuner.Categorical([1])]


@pytest.mark.parametrize("instance", _instances(), ids=lambda i: type(i).__name__)
def test_instance_attributes_and_fields_are_documented(instance):
    cls = type(instance)
    attributes = {name for name in vars(instance) if not name.startswith("_")}
    missing = attributes - documented_names(cls) - public_members(cls)
    assert not missing, f"{cls.__name__}: {sorted(missing)} are not in its docstring's Parameters/Attributes"


def test_panthers_module_layout_is_on_the_page():
    text = (DOCS / "tuner.md").read_text(encoding="utf-8")
    entries = directives("tuner.md")
    package = importlib.import_module("sketchcore.tuner.SkAutoTuner")
    modules = [package] + [importlib.import_module(m.name) for m in pkgutil.walk_packages(package.__path__,
                                                                                           package.__name__ + ".")]
    for module in modules:
        assert module.__name__.rsplit(".", 1)[-1] in text, module.__name__
        for name in module.__all__:
            obj = getattr(module, name)
            if name in tuner.__all__ and getattr(tuner, name) is obj:
                continue  # documented under sketchcore.tuner
            assert any(target.endswith(f".{name}") and entry["kind"] == "autofunction"
                       for target, entry in entries.items()), f"{module.__name__}.{name}"


def test_every_field_of_layer_report_is_on_the_torch_page():
    from sketchcore.torch import LayerReport
    fields = [f.name for f in dataclasses.fields(LayerReport)]
    entry = directives("torch.md")["sketchcore.torch.LayerReport"]
    assert entry["members"] == fields and "undoc-members" in entry["options"]
    table = (DOCS / "torch.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in table for name in fields)


def test_the_parser_reads_member_lists_across_lines(tmp_path):
    """The checks above see what the page lists (a continued :members: line included)."""
    (tmp_path / "page.md").write_text("```{eval-rst}\n.. autoclass:: a.B\n   :members: x, y,\n             z\n"
                                      "   :inherited-members:\n\n.. py:data:: C\n```\n", encoding="utf-8")
    assert directives("page.md", tmp_path) == {
        "a.B": {"kind": "autoclass", "members": ["x", "y", "z"], "options": {"members", "inherited-members"}},
        "C": {"kind": "py:data", "members": [], "options": set()}}
