"""SKConv2d's second stage (the 1×1 combination of 2T·k channels with U1s/2T plus bias) timed on
a CUDA device in four forms, forward and forward+backward, after the same first stage
(cuDNN conv2d with S1s): a batched matmul plus a bias pass (the CPU's choice), a 1×1 cuDNN
convolution with the bias fused, Panther's bmm on U expanded to the batch, and a GEMM over
channels-last pixels with the bias fused. Needs torch only (no sketchcore build):

    python3 bench/gpu/conv_stage2.py
"""
import torch
import torch.nn.functional as F


def matmul_bias(z, combine, bias):
    n, _, h, w = z.shape
    y = torch.matmul(combine.t(), z.reshape(n, -1, h * w)) + bias.view(1, -1, 1)
    return y.view(n, -1, h, w)


def conv1x1(z, combine, bias):
    return F.conv2d(z, combine.t()[:, :, None, None], bias)


def panther(z, combine, bias):
    n, c, h, w = z.shape
    out = torch.bmm(combine.t().expand(n, -1, c), z.view(n, c, h * w))
    return (out.view(n, -1, h, w) + bias.view(1, -1, 1, 1)).contiguous()


def channels_last_gemm(z, combine, bias):
    n, c, h, w = z.shape
    rows = z.permute(0, 2, 3, 1).reshape(-1, c)
    return torch.addmm(bias, rows, combine).view(n, h, w, -1).permute(0, 3, 1, 2)


def median_ms(fn, repeats=50):
    for _ in range(10):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


def main():
    print(torch.cuda.get_device_name(0), "torch", torch.__version__)
    for n, c, o, hw, t, k in [(16, 128, 128, 28, 1, 16), (32, 64, 64, 32, 2, 8), (64, 256, 256, 56, 2, 16)]:
        x = torch.randn(n, c, hw, hw, device="cuda", requires_grad=True)
        S1s = torch.randn(2 * t * k, c, 3, 3, device="cuda", requires_grad=True)
        combine = torch.randn(2 * t * k, o, device="cuda")
        bias = torch.randn(o, device="cuda", requires_grad=True)
        print(f"\nN{n} {c}->{o} {hw}x{hw} 2Tk={2 * t * k}: ms, median of 50")
        for name, stage2 in (("matmul + bias", matmul_bias), ("1x1 conv", conv1x1), ("Panther bmm", panther),
                             ("channels-last addmm", channels_last_gemm)):
            memory = torch.channels_last if stage2 is channels_last_gemm else torch.contiguous_format
            xin = x.detach().contiguous(memory_format=memory).requires_grad_()

            def forward():
                with torch.no_grad():
                    stage2(F.conv2d(xin, S1s, padding=1), combine, bias)

            def training():
                stage2(F.conv2d(xin, S1s, padding=1), combine, bias).sum().backward()
            print(f"  {name:<22} fwd {median_ms(forward):7.3f}   fwd+bwd {median_ms(training):7.3f}")


if __name__ == "__main__":
    main()
