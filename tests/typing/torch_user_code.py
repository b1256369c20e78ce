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

from sketchcore.torch import RandMultiHeadAttention, SKConv2d, make_performer, sketched_conv2d  # noqa: E402

conv = SKConv2d.fromTorch(nn.Conv2d(3, 8, 3, padding=1), num_terms=1, low_rank=4)
image: torch.Tensor = conv(torch.ones(1, 3, 8, 8))
kernel: torch.Tensor = conv.weight
back: nn.Conv2d = conv.to_conv2d()
functional: torch.Tensor = sketched_conv2d(torch.ones(1, 3, 8, 8), conv.S1s, conv.U1s, conv.bias, padding=1)
attention = RandMultiHeadAttention(16, 2, 8, kernel_fn="relu", iscausal=True, seed=1)
performer = make_performer(nn.MultiheadAttention(16, 2), 8, "softmax", False)
tokens = torch.ones(1, 5, 16)
attended, nothing = performer(tokens, tokens, tokens)
print(image, kernel, back, functional, attention, attended, nothing)
encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, batch_first=True), 1, enable_nested_tensor=False)
swapped: ConversionReport = sketch_model(encoder, attention=32)
print(swapped)

from typing import Optional  # noqa: E402

from sketchcore.torch import LayerReport, register_linear  # noqa: E402

register_linear("my_package.layers.Projection", weight="kernel", bias=None, orientation="in_out")
batches = [torch.ones(4, 16), torch.zeros(4, 16)]
aware: ConversionReport = sketch_model(nn.Sequential(nn.Linear(16, 16)), tolerance=0.2, calibration=batches)
row: LayerReport = aware["0"]
layer_error: Optional[float] = row.output_error
model_error: Optional[float] = aware.output_error
kept: list[LayerReport] = aware.kept
untied: ConversionReport = sketch_model(nn.Sequential(nn.Linear(16, 16)), param_ratio=0.5, tied="untie")
print(layer_error, model_error, kept, untied)

from sketchcore import linalg  # noqa: E402
from sketchcore.tuner import Categorical, Int, LayerConfig, SKAutoTuner, SpectralSearch, TuningConfigs  # noqa: E402

matrix = torch.ones(40, 6, dtype=torch.float64)
q_t, r_t, j_t = linalg.cqrrpt(matrix, 1.25)
u_t, s_t, v_t = linalg.randomized_svd(matrix, 2, 1e-6)
factors: tuple[torch.Tensor, torch.Tensor] = (q_t, v_t)


def score(m: nn.Module) -> float:
    return 1.0


mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
tuner = SKAutoTuner(mlp, TuningConfigs([LayerConfig({"type": "Linear"}, "auto"),
                                        LayerConfig(["0"], {"rank": Categorical([2, 4]), "low_rank": Int(1, 4)})]),
                    score, SpectralSearch(max_evaluations=10), accuracy_threshold=0.5)
chosen: dict[str, dict[str, object]] = tuner.get_best_params()
tuned_model: nn.Module = tuner.apply_best_params() if chosen else tuner.replace_without_tuning(0.2)
count: int = tuner.evaluations
print(factors, r_t, j_t, u_t, s_t, tuned_model, count)

from torch.distributed.tensor.parallel import ParallelStyle  # noqa: E402
from sketchcore.torch.parallel import (  # noqa: E402
    CollectiveLog, ColwiseParallel, RankParallel, RowwiseParallel, llama_plan)

styles: list[ParallelStyle] = [ColwiseParallel(), RowwiseParallel(use_local_output=False), RankParallel()]


def plan_of(llama: nn.Module) -> dict[str, ParallelStyle]:
    return llama_plan(llama)


with CollectiveLog() as log:
    pass
sent: int = log.total_bytes
print(styles, plan_of, sent)

from sketchcore.torch import Int8LowRankLinear, quantize_  # noqa: E402

int8_model: nn.Sequential = quantize_(nn.Sequential(LowRankLinear(16, 8, rank=4)).eval(), "int8")
int8_layer = Int8LowRankLinear.from_float(LowRankLinear(16, 8, rank=4).eval())
with torch.no_grad():
    int8_out: torch.Tensor = int8_layer(torch.ones(3, 16))
int8_report: ConversionReport = sketch_model(nn.Sequential(nn.Linear(16, 16)), low_rank=4, quantize="int8")
int8_kind: str = int8_report["0"].quantize
int8_dense: nn.Linear = int8_layer.to_linear()
print(int8_model, int8_out, int8_kind, int8_dense)

from sketchcore.torch import Calibration, HealReport, Int8Linear, heal  # noqa: E402

teacher = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
student = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
student.load_state_dict(teacher.state_dict())
calibration = Calibration(student, [torch.randn(32, 16) for _ in range(2)])
global_report: ConversionReport = sketch_model(student, bytes_ratio=0.3, calibration=calibration,
                                               allocation="global", quantize="int8")
budget = global_report.budget
predicted = global_report.predicted_output_error
choice: str = global_report.replaced["0"].choice if "0" in global_report.replaced else "dense"
healing: HealReport = heal(student, teacher, [torch.randn(32, 16)], steps=2, progress=False)
last_loss: float = healing.losses[-1]
full_int8 = Int8Linear.from_float(nn.Linear(16, 8).eval())
with torch.no_grad():
    full_out: torch.Tensor = full_int8(torch.ones(3, 16))
print(budget, predicted, choice, last_loss, full_out)

from sketchcore.torch import Fp8Config, Int8Config, export_onnx, onnx_translations  # noqa: E402


def only_attention(module: nn.Module, name: str) -> bool:
    return "attn" in name


configured: nn.Sequential = quantize_(nn.Sequential(LowRankLinear(16, 8, rank=4), nn.Linear(8, 4)).eval(),
                                      Int8Config(dense=True), filter_fn=only_attention)
fp8_format: str = Fp8Config().format
table = onnx_translations()
print(configured, fp8_format, len(table), export_onnx)
