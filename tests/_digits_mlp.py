"""The tuner's reference task: scikit-learn's digits, an MLP 64 → 256 → 256 → 10 trained for a
couple of seconds with a fixed seed, and its test accuracy (used by tests and bench)."""
import torch
from torch import nn


def digits_task(epochs=30, seed=0):
    """(model in eval mode, accuracy function, dense accuracy)."""
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X, y = torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)
    order = torch.randperm(len(X), generator=torch.Generator().manual_seed(seed))
    train, test = order[:1400], order[1400:]
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(epochs):
        for i in range(0, len(train), 64):
            batch = train[i:i + 64]
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(X[batch]), y[batch]).backward()
            optimizer.step()
    model.eval()

    def accuracy(m):
        with torch.no_grad():
            return (m(X[test]).argmax(1) == y[test]).float().mean().item()

    return model, accuracy, accuracy(model)


def black_box_search(model, accuracy, threshold, trials, sampler="random", seed=0):
    """A Panther-style black-box search over the tuner's space (each Linear layer: a LowRankLinear
    of any rank that stores fewer numbers, or dense), each trial one full evaluation; the
    objective is the stored size, infeasible trials penalised by how far they miss. Returns
    (smallest feasible size, evaluations used, its ranks)."""
    import random
    from sketchcore.torch import LowRankLinear
    from sketchcore.tuner._candidates import stored

    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    spaces = [[r for r in range(1, min(m.in_features, m.out_features) + 1)
               if r * (m.in_features + m.out_features) < m.in_features * m.out_features] + ["dense"]
              for _, m in layers]
    dense_size = stored(model)
    built = {}  # each (layer, rank) converted once: the cost that matters here is evaluations

    def evaluate(choice):
        for (name, layer), rank in zip(layers, choice):
            if rank != "dense" and (name, rank) not in built:
                built[name, rank] = LowRankLinear.from_linear(layer, rank)
            new = layer if rank == "dense" else built[name, rank]
            setattr(model, name, new)
        size = stored(model)
        acc = accuracy(model)
        for name, layer in layers:
            setattr(model, name, layer)
        return size, acc

    best, best_choice = dense_size, ["dense"] * len(layers)
    if sampler == "random":
        rng = random.Random(seed)
        for _ in range(trials):
            choice = [rng.choice(space) for space in spaces]
            size, acc = evaluate(choice)
            if acc >= threshold and size < best:
                best, best_choice = size, choice
        return best, trials, best_choice
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed), direction="minimize")
    for _ in range(trials):
        trial = study.ask()
        choice = [trial.suggest_categorical(name, space) for (name, _), space in zip(layers, spaces)]
        size, acc = evaluate(choice)
        if acc >= threshold and size < best:
            best, best_choice = size, choice
        study.tell(trial, size if acc >= threshold else dense_size * (2 + threshold - acc))
    return best, trials, best_choice
