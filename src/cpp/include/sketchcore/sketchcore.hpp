/// @file sketchcore.hpp
/// @brief Umbrella header: everything a C++ application needs from sketchcore.
#pragma once

#include "sketchcore/epilogue.hpp"
#include "sketchcore/errors.hpp"
#include "sketchcore/execution.hpp"
#include "sketchcore/gated_paths.hpp"
#include "sketchcore/export.hpp"
#include "sketchcore/fp8_matmul.hpp"
#include "sketchcore/int8_matmul.hpp"
#include "sketchcore/memory.hpp"
#include "sketchcore/performer.hpp"
#include "sketchcore/quantized.hpp"
#include "sketchcore/runtime.hpp"
#include "sketchcore/sketch.hpp"
#include "sketchcore/sketched_matmul.hpp"
#include "sketchcore/tensor.hpp"
#include "sketchcore/version.hpp"
