# pyright: strict
"""A user's PyTorch script over sketchcore.torch, type-checked like user_code.py."""
import torch
from torch import nn
from sketchcore.torch import SKLinear, sketch_model, sketched_linear

layer = SKLinear(16, 8, num_terms=2, low_rank=4, activation="gelu")
y: torch.Tensor = layer(torch.ones(3, 16))
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
replaced: dict[str, nn.Linear] = sketch_model(model, 1, 4)
lin = SKLinear.from_linear(nn.Linear(16, 8), 1, 4)
out: torch.Tensor = sketched_linear(torch.ones(2, 16), torch.ones(16, 4), torch.ones(4, 8))
print(y, replaced, lin, out)
