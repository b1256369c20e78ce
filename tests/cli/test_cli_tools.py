"""The command-line tool's subcommands, run as a user runs them (subprocesses): --version,
info, landscape (table, JSON, CSV, a PNG that decodes, the hint without matplotlib, Ctrl-C),
memory and convert (including files that are not torch models)."""
import csv
import json
import math
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import sketchcore


def run(*args, timeout=300, **kwargs):
    return subprocess.run([sys.executable, "-m", "sketchcore", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def test_version():
    done = run("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"sketchcore {sketchcore.__version__}"


def test_info_text_and_json():
    text = run("info")
    assert text.returncode == 0 and "blas" in text.stdout and "threads" in text.stdout
    facts = json.loads(run("info", "--json").stdout)
    assert facts["sketchcore"] == sketchcore.__version__
    assert facts["blas"] == sketchcore.build_info()["blas"] and facts["threads"] == sketchcore.get_num_threads()
    assert facts["cuda_backend"] == sketchcore.build_info()["cuda"]
    assert facts["devices"][0].startswith("cpu (") and "numpy" in facts["frameworks"]
    import numpy as np
    assert facts["cpu_gemms"]["numpy arrays"] == sketchcore.cpu_blas_of(np.empty(0))
    assert facts["cpu_kernels"] == {"bf16_gemm": sketchcore.build_info()["cpu_bf16_gemm"],
                                    "activations": sketchcore.build_info()["cpu_activation_kernels"]}
    if not sketchcore.build_info()["cuda"]:  # a CPU-only build reports cuBLASLt as not built, not as an error
        assert facts["cublaslt"] == {"status": "not built (this build has no CUDA backend)"}
        assert "error" not in text.stdout.split("cublaslt", 1)[1].splitlines()[0]


def test_landscape_quick_writes_table_json_csv_and_plot(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = {k: tmp_path / f"landscape.{k}" for k in ("json", "csv", "png")}
    start = time.perf_counter()
    done = run("landscape", "--quick", "--backward", "--json", str(paths["json"]), "--csv", str(paths["csv"]),
               "--plot", str(paths["png"]), "--spectrum", "exp")
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - start < 60
    records = json.loads(paths["json"].read_text())["records"]
    sketched = [r for r in records if r["layer"] == "SKLinear"]  # the default: Panther's meaning of T and k
    assert len(sketched) == 9 and len(records) == 10  # 3 terms × 3 ranks, plus the dense baseline
    with open(paths["csv"]) as f:
        assert len(list(csv.DictReader(f))) == 10
    s = np.exp(-np.arange(1, 257) / 32)
    for r in sketched:  # SKLinear(T, k): T·k·(in+out) learnable, as many fixed, 2T products of rank k
        assert r["params"] == r["buffers"] == r["num_terms"] * r["rank"] * 512
        assert r["flops"] == 2 * 256 * 2 * r["params"] and r["map_rank"] == min(2 * r["num_terms"] * r["rank"], 256)
        assert r["forward_s"] > 0 and r["backward_s"] > 0 and r["peak_pool_bytes"] > 0
        rank = r["map_rank"]
        assert math.isclose(r["error"], math.sqrt(np.sum(s[rank:] ** 2) / np.sum(s**2)), rel_tol=1e-8, abs_tol=1e-12)
    image = plt.imread(paths["png"])
    assert image.ndim == 3 and image.shape[0] > 400 and image.shape[1] > 600
    table = [line for line in done.stdout.splitlines() if line.startswith(("dense", "SKLinear"))]
    assert len(table) == 10


@pytest.mark.parametrize("layer, terms, learnable, buffers, rank", [
    ("lowrank", 1, lambda T, k: k * 512, lambda T, k: 0, lambda T, k: k),
    ("operator", 2, lambda T, k: T * k * 512, lambda T, k: 0, lambda T, k: T * k),
])
def test_landscape_describes_the_layer_the_user_builds(tmp_path, layer, terms, learnable, buffers, rank):
    path = tmp_path / "l.json"
    done = run("landscape", "--quick", "--layer", layer, "--terms", str(terms), "--ranks", "8", "16",
               "--repeats", "1", "--json", str(path))
    assert done.returncode == 0, done.stderr
    rows = [r for r in json.loads(path.read_text())["records"] if r["layer"] != "dense"]
    assert [r["layer"] for r in rows] == [{"lowrank": "LowRankLinear", "operator": "operator"}[layer]] * 2
    for r in rows:
        T, k = r["num_terms"], r["rank"]
        assert (r["params"], r["buffers"], r["map_rank"]) == (learnable(T, k), buffers(T, k), rank(T, k))
        assert r["flops"] == 2 * 256 * r["params"]


def test_landscape_lowrank_has_no_terms():
    done = run("landscape", "--quick", "--layer", "lowrank", "--terms", "2")
    assert done.returncode == 2 and "--terms: LowRankLinear has one term (its rank is --rank); expected 1, got 2" in done.stderr


def test_landscape_plot_without_matplotlib_says_how_to_install(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from sketchcore.cli import main\n"
            f"sys.exit(main(['landscape', '--quick', '--plot', r'{tmp_path / 'x.png'}']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "pip install 'sketchcore[plot]'" in done.stderr
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("args", [["--terms", "0"], ["--ranks", "x"], ["--device", "tpu"], ["--in", "-4"]])
def test_landscape_bad_arguments(args):
    done = run("landscape", "--quick", *args)
    assert done.returncode == 2 and "usage:" in done.stderr


def test_ctrl_c_stops_without_a_traceback():
    """SIGINT once the command says it is working (its first progress line on stderr), not after a
    fixed sleep: on a loaded machine the signal could land while Python was still importing."""
    # SIGINT's default disposition restored for the child: a shell without job control starts a
    # background job (`.ci/run ... &`) with SIGINT ignored, which the child would inherit, and a
    # Python started with SIGINT ignored installs no KeyboardInterrupt handler.
    process = subprocess.Popen([sys.executable, "-m", "sketchcore", "landscape", "--in", "1024", "--batch", "1024",
                                "--terms", "1", "2", "4", "8", "--ranks", "64", "128", "--repeats", "10"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stderr], daemon=True)
    reader.start()
    seen = []
    while not (seen and seen[-1].startswith("landscape [")):
        seen.append(lines.get(timeout=120))  # queue.Empty fails the test if the command never starts
    process.send_signal(signal.SIGINT)
    process.wait(timeout=120)
    reader.join(timeout=10)
    err = "".join(seen + list(lines.queue))
    assert process.returncode == 130 and "interrupted" in err and "Traceback" not in err, err


@pytest.mark.parametrize("layer, learnable, buffers, z_columns", [
    ("sklinear", 2 * 16 * 2048, 2 * 16 * 2048, 4 * 16),  # SKLinear(T=2, k=16): 2T products, T learnable
    ("operator", 2 * 16 * 2048, 0, 2 * 16),
])
def test_memory_breakdown_quick(layer, learnable, buffers, z_columns):
    done = run("memory", "--quick", "--terms", "2", "--rank", "16", "--layer", layer)
    assert done.returncode == 0, done.stderr
    rows = {line[:30].strip(): line[30:].split() for line in done.stdout.splitlines() if len(line) > 30}
    dense, sketched = float(rows["learnable parameters"][0]), float(rows["learnable parameters"][1])
    assert math.isclose(dense, (1024 * 1024 + 1024) * 4 / 2**20, abs_tol=0.006)
    assert math.isclose(sketched, (learnable + 1024) * 4 / 2**20, abs_tol=0.006)
    assert math.isclose(float(rows["fixed buffers"][1]), buffers * 4 / 2**20, abs_tol=0.006)
    assert float(rows["saved intermediate Z = x·S"][1]) == pytest.approx(1024 * z_columns * 4 / 2**20, abs=0.006)
    assert float(rows["pooled workspace (measured)"][1]) > 0
    assert float(rows["total"][1]) < float(rows["total"][0])


def test_convert_compresses_a_saved_model_into_a_state_dict_the_safe_loader_reads(tmp_path):
    torch = pytest.importorskip("torch")
    import sketchcore.torch as sct
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    source, target = tmp_path / "model.pt", tmp_path / "small.pt"
    torch.save(model, source)
    done = run("convert", str(source), "-o", str(target), "--rank", "32", "--include", "0")
    assert done.returncode == 0, done.stderr
    assert "LowRankLinear" in done.stdout and "total parameters" in done.stdout and "restore_model" in done.stdout
    state = torch.load(target)  # weights_only=True, torch's default
    small = sct.restore_model(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)),
                              state)
    assert type(small[0]).__name__ == "LowRankLinear" and type(small[2]) is torch.nn.Linear
    x = torch.randn(5, 32)
    torch.testing.assert_close(small(x), model(x), rtol=1e-4, atol=1e-5)  # rank 32 = full rank of a 32-input layer


def test_convert_sklinear_with_panther_init_and_attention_into_a_whole_model(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 1,
                                        enable_nested_tensor=False)
    source, target = tmp_path / "model.pt", tmp_path / "small.pt"
    torch.save(model, source)
    done = run("convert", str(source), "-o", str(target), "--layer", "sklinear", "--rank", "4", "--init", "panther",
               "--attention", "16", "--whole-model")
    assert done.returncode == 0, done.stderr
    assert "weights_only=False" in done.stdout
    small = torch.load(target, weights_only=False)
    kinds = {type(m).__name__ for m in small.modules()}
    assert {"SKLinear", "RandMultiHeadAttention"} <= kinds and small.layers[0].linear1.init == "panther"


def test_convert_says_how_to_fix_a_class_it_cannot_import(tmp_path):
    torch = pytest.importorskip("torch")
    package = tmp_path / "mymodels"
    package.mkdir()
    (package / "__init__.py").write_text("import torch\nclass Net(torch.nn.Sequential):\n    pass\n")
    make = ("import torch, mymodels\n"
            f"torch.save(mymodels.Net(torch.nn.Linear(16, 16)), r'{tmp_path / 'net.pt'}')\n")
    subprocess.run([sys.executable, "-c", make], cwd=tmp_path, check=True, timeout=120)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run("convert", str(tmp_path / "net.pt"), "-o", "out.pt", "--rank", "4", cwd=elsewhere)
    assert done.returncode == 2 and "the model's class cannot be imported here" in done.stderr
    assert "PYTHONPATH" in done.stderr and "--import" in done.stderr and "Traceback" not in done.stderr
    done = run("convert", str(tmp_path / "net.pt"), "-o", "out.pt", "--rank", "4", "--import", "mymodels",
               cwd=elsewhere, env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    script = ("import torch\nclass Net(torch.nn.Sequential):\n    pass\n"
              f"torch.save(Net(torch.nn.Linear(16, 16)), r'{tmp_path / 'main.pt'}')\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    done = run("convert", str(tmp_path / "main.pt"), "-o", "out.pt", "--rank", "4", cwd=elsewhere)
    assert done.returncode == 2 and "defined in the script that saved it (__main__)" in done.stderr


@pytest.mark.parametrize(("make", "message"), [
    (lambda torch, p: torch.save({"w": torch.zeros(2)}, p), "expected a whole model saved with torch.save"),
    (lambda torch, p: p.write_text("not a model"), "not a file saved by torch.save"),
    (lambda torch, p: None, "no such file"),
])
def test_convert_refuses_what_is_not_a_model(tmp_path, make, message):
    torch = pytest.importorskip("torch")
    path = tmp_path / "input.pt"
    make(torch, path)
    done = run("convert", str(path), "-o", str(tmp_path / "out.pt"), "--tolerance", "0.1")
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_convert_needs_a_size():
    done = run("convert", "model.pt", "-o", "out.pt")
    assert done.returncode == 2 and "one of the arguments --tolerance --param-ratio --rank is required" in done.stderr
    done = run("convert", "model.pt", "-o", "out.pt", "--rank", "4", "--tolerance", "0.1")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr
