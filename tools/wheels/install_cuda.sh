#!/usr/bin/env bash
# Installs what building the CUDA backend needs, and nothing else, into a manylinux_2_28 (AlmaLinux 8)
# build container: nvcc and the CUDA runtime's headers and static library (cuBLASLt is declared by
# src/cuda/cublaslt_api.hpp and loaded at run time, so no cuBLAS package). cibuildwheel's before-all
# for the CUDA wheels (.github/workflows/wheels.yml); /usr/local/cuda then points at the toolkit.
#   bash tools/wheels/install_cuda.sh 13.0      (or 12.9)
set -euo pipefail
version=${1:?usage: install_cuda.sh MAJOR.MINOR (e.g. 13.0)}
[[ $version =~ ^[0-9]+\.[0-9]+$ ]] || { echo "install_cuda.sh: expected MAJOR.MINOR, got '$version'"; exit 2; }
arch=$(uname -m)
[ "$arch" = aarch64 ] && arch=sbsa   # NVIDIA's name for its Arm server repository
dnf install -y -q dnf-plugins-core
dnf config-manager --add-repo "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/$arch/cuda-rhel8.repo"
suffix=${version/./-}
dnf install -y -q "cuda-nvcc-$suffix" "cuda-cudart-devel-$suffix"
ln -sfn "/usr/local/cuda-$version" /usr/local/cuda
/usr/local/cuda/bin/nvcc --version
