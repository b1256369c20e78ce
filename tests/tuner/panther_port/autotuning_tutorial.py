"""Panther's autotuning tutorial, walked through in Panther's API with sketchcore imports: the quick
start, layer discovery, constrained tuning with OptunaSearch, samplers, the DataFrame analysis,
Optuna's plots of the study, ModelVisualizer and the complete transformer example with a sqlite
study and a pickled results file. Written for sketchcore's tests (a small CPU model and small
trial counts); run by tests/tuner/test_tuner_panther_port.py in a temporary directory.

Each section asserts what the tutorial promises, so the script fails where sketchcore would
break Panther code.
"""
import copy
import math
import pickle
import time

import optuna
import torch
import torch.nn as nn

from sketchcore.tuner import (Categorical, Int, LayerConfig, ModelVisualizer, OptunaSearch, SKAutoTuner,
                              TuningConfigs)

torch.manual_seed(0)
VOCAB, LENGTH, DIM, CLASSES = 32, 12, 48, 4


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(x.shape[-1]), dim=-1)
        return self.out_proj(weights @ v)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attn = Attention(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList([Block(DIM)])
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x)
        return self.head(x.mean(1))


# The task: which of four groups of tokens is the most frequent in a sequence.
tokens = torch.randint(0, VOCAB, (1536, LENGTH))
labels = torch.stack([(tokens // (VOCAB // CLASSES) == c).sum(1) for c in range(CLASSES)], 1).argmax(1)
train, val = slice(0, 1024), slice(1024, None)
model = TinyTransformer()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(25):
    for i in range(0, 1024, 128):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(tokens[train][i:i + 128]), labels[train][i:i + 128]).backward()
        optimizer.step()
model.eval()


def accuracy_eval_func(model):
    """Validation accuracy (a fraction), as the tutorial's accuracy function."""
    model.eval()
    with torch.no_grad():
        predicted = model(tokens[val]).argmax(-1)
    return (predicted == labels[val]).float().mean().item()


def speed_eval_func(model):
    """Throughput in samples per second, with a warm-up, as the tutorial's speed function."""
    model.eval()
    x = tokens[:64]
    with torch.no_grad():
        for _ in range(2):
            model(x)
        start = time.perf_counter()
        for _ in range(5):
            model(x)
    return 5 * 64 / (time.perf_counter() - start)


dense_accuracy = accuracy_eval_func(model)
print(f"dense accuracy {dense_accuracy:.4f}")
assert dense_accuracy > 0.8, dense_accuracy
linear_names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]

# -- Quick start: "auto" ranges, every Linear layer, no threshold (the most accurate setting) ------------
quick_model = copy.deepcopy(model)
config = LayerConfig(layer_names={"type": "Linear"}, params="auto", separate=True)
tuner = SKAutoTuner(model=quick_model, configs=TuningConfigs([config]), accuracy_eval_func=accuracy_eval_func,
                    verbose=True)
tuner.tune()
optimized_model = tuner.apply_best_params()
replaced = [name for name in linear_names if not isinstance(optimized_model.get_submodule(name), nn.Linear)]
assert replaced == linear_names, replaced  # without a threshold every selected layer is sketched, as in Panther
assert accuracy_eval_func(optimized_model) == tuner.final_accuracy
print(f"quick start: accuracy {tuner.final_accuracy:.4f} after {tuner.evaluations} evaluations")

# -- Layer discovery --------------------------------------------------------------------------------------
resolver = tuner.getResolver()
assert resolver.resolve({"type": "Linear"}) == sorted(linear_names)  # a dict selector lists names sorted, as Panther
assert resolver.resolve({"pattern": "layers\\.[0-5]\\..*", "type": "Linear"}) == sorted(linear_names[:-1])
assert resolver.resolve({"contains": "attn"})[0] == "layers.0.attn"
assert resolver.resolve(["layers.0.mlp.0", "layers.0.mlp.2"]) == ["layers.0.mlp.0", "layers.0.mlp.2"]

# -- Constrained tuning: maximize speed with accuracy ≥ the threshold --------------------------------------
threshold = round(dense_accuracy - 0.03, 2)
config = LayerConfig(
    layer_names={"type": "Linear"},
    params={"num_terms": Categorical([1, 2, 3, 4]), "low_rank": Int(8, 128, step=8)},
    separate=True,
    copy_weights=True,
)
constrained_model = copy.deepcopy(model)
tuner = SKAutoTuner(
    model=constrained_model,
    configs=TuningConfigs([config]),
    accuracy_eval_func=accuracy_eval_func,
    accuracy_threshold=threshold,
    optmization_eval_func=speed_eval_func,
    search_algorithm=OptunaSearch(n_trials=6, seed=42),
    verbose=True,
)
best_params = tuner.tune()
optimized_model = tuner.apply_best_params()
print(f"Best parameters found: { {name: entry['params'] for name, entry in best_params.items()} }")
assert set(best_params) == set(linear_names)
for name, entry in best_params.items():
    assert set(entry) == {"params", "copy_weights", "best_layer"}
    rows = tuner.results[name]
    assert len(rows) == 6
    for row in rows:  # the speed is measured exactly for the trials that meet the threshold
        if row["accuracy"] >= threshold:
            assert row["speed"] is not None and row["score"] == row["speed"] > 0, row
        else:
            assert row["speed"] is None and row["score"] == float("-inf"), row
    feasible = [row for row in rows if row["accuracy"] >= threshold]
    if feasible:
        assert entry["params"] == max(feasible, key=lambda r: r["score"])["params"]
    else:
        assert entry["params"] is None and entry["best_layer"] is None

# -- Samplers ---------------------------------------------------------------------------------------------
from optuna.samplers import CmaEsSampler, RandomSampler, TPESampler  # noqa: E402

for sampler in (TPESampler(seed=42), CmaEsSampler(seed=42), RandomSampler(seed=42)):
    search = OptunaSearch(n_trials=50, sampler=sampler)
    assert search.sampler is sampler and search.n_trials == 50

# -- DataFrame analysis -----------------------------------------------------------------------------------
df = tuner.get_results_dataframe()
assert {"layer_name", "num_terms", "low_rank", "accuracy", "speed", "score"} <= set(df.columns)
best_per_layer = df.loc[df.groupby("layer_name")["score"].idxmax()]
print(best_per_layer)
valid = df[df["accuracy"] >= threshold]
print(valid.sort_values("speed", ascending=False).head(10))
for param in ["num_terms", "low_rank"]:
    if param in df.columns:
        print(f"\n{param} vs Score:")
        print(df.groupby(param)["score"].agg(["mean", "std", "count"]))
print(df[["num_terms", "low_rank", "accuracy"]].corr())
assert len(df) == 6 * len(linear_names) and valid["speed"].notna().all()

# -- Visualization of the study (Optuna's matplotlib plots: plotly is not needed) -------------------------
import optuna.visualization.matplotlib as vis  # noqa: E402

study = tuner.search_algorithm.study
assert isinstance(study, optuna.Study) and len(study.trials) == 6
vis.plot_optimization_history(study).figure.savefig("history.png")
vis.plot_parallel_coordinate(study, params=["num_terms", "low_rank"]).figure.savefig("parallel.png")

# -- Complete example: attention and MLP layers, a persistent study, saved results -------------------------
ModelVisualizer.print_module_tree(model)
configs = TuningConfigs([
    LayerConfig(
        layer_names={"contains": "attn", "type": "Linear"},
        params={"num_terms": Categorical([1, 2, 3]), "low_rank": Int(8, 32, step=8)},
        separate=True,
    ),
    LayerConfig(
        layer_names={"contains": "mlp", "type": "Linear"},
        params={"num_terms": Categorical([1, 2, 4]), "low_rank": Int(8, 64, step=8)},
        separate=True,
    ),
])
example_model = copy.deepcopy(model)
tuner = SKAutoTuner(
    model=example_model,
    configs=configs,
    accuracy_eval_func=accuracy_eval_func,
    accuracy_threshold=threshold,
    optmization_eval_func=speed_eval_func,
    search_algorithm=OptunaSearch(n_trials=4, study_name="transformer_tuning",
                                  storage="sqlite:///transformer_tuning.db", seed=42),
    verbose=True,
)
tuner.tune()
optimized_model = tuner.apply_best_params()
orig_acc = accuracy_eval_func(model)
opt_acc = accuracy_eval_func(optimized_model)
orig_speed = speed_eval_func(model)
opt_speed = speed_eval_func(optimized_model)
print(f"Original:  accuracy={orig_acc:.4f}, speed={orig_speed:.1f} samples/sec")
print(f"Optimized: accuracy={opt_acc:.4f}, speed={opt_speed:.1f} samples/sec")
print(f"Speedup: {opt_speed / orig_speed:.2f}x")
tuned_names = [name for config in tuner.getConfigs() for name in config.layer_names]
assert len(tuned_names) == 6  # four attention projections and two MLP layers
# one stored study per tuned layer: Panther's single name would collide in the storage
names = optuna.get_all_study_names("sqlite:///transformer_tuning.db")
assert sorted(names) == sorted(["transformer_tuning"] + [f"transformer_tuning_{i}" for i in range(1, 6)]), names
tuner.save_tuning_results("best_config.pkl")
with open("best_config.pkl", "rb") as f:
    saved = pickle.load(f)
assert set(saved) >= {"results", "best_params", "config"}
for name, entry in saved["best_params"].items():
    assert (entry["best_layer"] is None) == (entry["params"] is None)
vis.plot_optimization_history(tuner.search_algorithm.study)

# the results load into a fresh tuner over the dense model and rebuild the same layers
again = SKAutoTuner(model=copy.deepcopy(model), configs=configs, accuracy_eval_func=accuracy_eval_func,
                    accuracy_threshold=threshold, optmization_eval_func=speed_eval_func)
again.load_tuning_results("best_config.pkl")
with torch.no_grad():
    assert torch.equal(again.apply_best_params()(tokens[val]), optimized_model(tokens[val]))
print("tutorial: done")
