"""The examples of Panther's tuner README (panther/tuner/SkAutoTuner/README.md), walked through in
Panther's API with its module layout (``...tuner.SkAutoTuner``, ``.Configs``, ``.Searching``) and
sketchcore imports: the basic usage with a speed objective, legacy list parameters, OptunaSearch
with CMA-ES, Grid and Random samplers, ParamSpec types and Optuna's plots of the study. Written for
sketchcore's tests (a small CPU model); run by tests/tuner/test_tuner_panther_port.py in a temporary
directory. Each section asserts what the README promises.
"""
import time

import torch
import torch.nn as nn

from sketchcore.tuner.SkAutoTuner import LayerConfig, SKAutoTuner, TuningConfigs
from sketchcore.tuner.SkAutoTuner.Configs import Categorical, Int

torch.manual_seed(0)


class MyNeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 12, 3, padding=1)
        self.conv2 = nn.Conv2d(12, 24, 3, padding=1)
        self.fc1 = nn.Linear(24, 64)
        self.fc2 = nn.Linear(64, 4)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x)).mean((2, 3))
        return self.fc2(torch.relu(self.fc1(x)))


# The task: which texture (horizontal or vertical stripes, checkerboard, diagonal) an 8×8 noisy image shows.
grid = torch.arange(8)
patterns = torch.stack([(grid[:, None] % 2).expand(8, 8), (grid[None, :] % 2).expand(8, 8),
                        (grid[:, None] + grid[None, :]) % 2, ((grid[:, None] - grid[None, :]) % 4 == 0).long()]).float()
labels = torch.randint(0, 4, (640,))
images = (patterns[labels] + 0.8 * torch.randn(640, 8, 8))[:, None]
model = MyNeuralNetwork()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(100):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(images[:384]), labels[:384]).backward()
    optimizer.step()
model.eval()


def evaluate_accuracy(model):
    with torch.no_grad():
        return (model(images[384:]).argmax(1) == labels[384:]).float().mean().item()


def evaluate_speed(model):
    """Throughput (higher is better)."""
    with torch.no_grad():
        model(images[:64])
        start = time.perf_counter()
        for _ in range(3):
            model(images[:64])
    return 3 * 64 / (time.perf_counter() - start)


dense_accuracy = evaluate_accuracy(model)
print(f"dense accuracy {dense_accuracy:.4f}")
assert dense_accuracy > 0.8, dense_accuracy
threshold = round(dense_accuracy - 0.05, 2)

# -- Basic usage: the default search, a threshold and a speed objective ----------------------------------
configs = TuningConfigs([
    LayerConfig(
        layer_names=["conv1", "conv2"],
        params={
            "num_terms": Categorical([1, 2, 3]),
            "low_rank": Int(8, 128, step=8),
        },
        separate=True,
    )
])
tuner = SKAutoTuner(
    model=model,
    configs=configs,
    accuracy_eval_func=evaluate_accuracy,
    accuracy_threshold=threshold,
    optmization_eval_func=evaluate_speed,
    verbose=True,
)
tuner.tune()
optimized_model = tuner.apply_best_params()
results_df = tuner.get_results_dataframe()
print(results_df[["layer_name", "num_terms", "low_rank", "accuracy", "speed", "score"]])
assert evaluate_accuracy(optimized_model) >= threshold
feasible = results_df[results_df["accuracy"] >= threshold]
assert feasible["speed"].notna().all() and (feasible["score"] == feasible["speed"]).all()
assert (results_df[results_df["accuracy"] < threshold]["score"] == float("-inf")).all()

# -- Legacy list-based parameters ------------------------------------------------------------------------
configs = TuningConfigs([
    LayerConfig(
        layer_names=["fc1"],
        params={
            "num_terms": [1, 2, 3],
            "low_rank": [8, 16, 32, 64],
        },
    )
])

# -- Customizing Optuna search: CMA-ES, and the study behind it ------------------------------------------
from optuna.samplers import CmaEsSampler  # noqa: E402

from sketchcore.tuner.SkAutoTuner.Searching import OptunaSearch  # noqa: E402

tuner = SKAutoTuner(
    model=model,
    configs=configs,
    accuracy_eval_func=evaluate_accuracy,
    search_algorithm=OptunaSearch(
        n_trials=8,
        sampler=CmaEsSampler(seed=42, warn_independent_sampling=False),
        seed=42,
    ),
    verbose=True,
)
tuner.tune()
study = tuner.search_algorithm.study
print(study.best_params)
print(study.trials_dataframe())
assert len(study.trials) == 8 and set(study.best_params) == {"num_terms", "low_rank"}
# without a threshold the score is the accuracy, and the most accurate trial wins
chosen = tuner.get_best_params()["fc1"]["params"]
assert max(tuner.results["fc1"], key=lambda row: row["score"])["params"] == chosen
assert all(row["score"] == row["accuracy"] and row["speed"] is None for row in tuner.results["fc1"])

# -- Grid and random search through Optuna's samplers ----------------------------------------------------
from optuna.samplers import GridSampler, RandomSampler  # noqa: E402

search_space = {
    "num_terms": [1, 2, 3],
    "low_rank": [8, 16, 32, 64],
}
tuner = SKAutoTuner(
    model=model,
    configs=configs,
    accuracy_eval_func=evaluate_accuracy,
    search_algorithm=OptunaSearch(
        sampler=GridSampler(search_space),
    ),
)
tuner.tune()
tried = {(t.params["num_terms"], t.params["low_rank"]) for t in tuner.search_algorithm.study.trials}
assert len(tuner.search_algorithm.study.trials) == 12 and len(tried) == 12  # the grid once, then it stops

tuner = SKAutoTuner(
    model=model,
    configs=configs,
    accuracy_eval_func=evaluate_accuracy,
    search_algorithm=OptunaSearch(
        n_trials=5,
        sampler=RandomSampler(seed=42),
    ),
)
tuner.tune()
assert len(tuner.get_results_dataframe()) == 5

# -- ParamSpec types --------------------------------------------------------------------------------------
from sketchcore.tuner.SkAutoTuner.Configs import Float  # noqa: E402

params = {
    "num_terms": Categorical([1, 2, 3, 4]),
    "low_rank": Int(8, 256, step=8),
    "dropout": Float(0.0, 0.5, step=0.1),
    "learning_rate": Float(1e-5, 1e-2, log=True),
}
assert params["low_rank"].step == 8 and params["learning_rate"].log

# -- Tuning visualizations with Optuna (its matplotlib backend: plotly is not needed) --------------------
import optuna  # noqa: E402

study = tuner.search_algorithm.study
optuna.visualization.matplotlib.plot_optimization_history(study).figure.savefig("history.png")
optuna.visualization.matplotlib.plot_param_importances(study).figure.savefig("importances.png")
optuna.visualization.matplotlib.plot_parallel_coordinate(study).figure.savefig("parallel.png")
optuna.visualization.matplotlib.plot_contour(study).figure.savefig("contour.png")
print("readme: done")
