# pyright: strict
"""A user's PyTorch script over sketchcore.torch, type-checked like user_code.py."""
import torch
from torch import nn
from sketchcore.torch import SKLinear, sketch_model, sketched_linear

layer = SKLinear(16, 8, num_terms=2, low_rank=4, activation="gelu")
y: torch.Tensor = layer(torch.ones(3, 16))
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
replaced = sketch_model(model, 1, 4)
lin = SKLinear.from_linear(nn.Linear(16, 8), 1, 4)
out: torch.Tensor = sketched_linear(torch.ones(2, 16), torch.ones(16, 4), torch.ones(4, 8))
print(y, replaced, lin, out)

from sketchcore.torch import ConversionReport, LowRankLinear, restore_model  # noqa: E402

low = LowRankLinear.from_linear(nn.Linear(16, 8), tolerance=0.5)
w: torch.Tensor = low.weight
dense: nn.Linear = low.to_linear()
report: ConversionReport = sketch_model(model, tolerance=0.1, layer="lowrank")
rank: int = report["0"].rank if "0" in report else 0
restored: nn.Module = restore_model(model, model.state_dict())
print(str(report), w.shape, dense, rank, restored)
