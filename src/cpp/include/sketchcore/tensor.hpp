/// @file tensor.hpp
/// @brief Element types, devices and the non-owning strided tensor view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sketchcore/export.hpp"

namespace sketchcore {

/// Element type of a tensor. Every backend takes all four; the 16-bit types are computed
/// with float32 accumulation (on the CPU through float32 copies of the operands).
enum class DType : std::uint8_t {
  float16,   ///< IEEE 754 binary16
  bfloat16,  ///< bfloat16 (8-bit exponent, 7-bit mantissa)
  float32,   ///< IEEE 754 binary32
  float64,   ///< IEEE 754 binary64
};

/// Returns the NumPy-style name of `dtype` ("float32", ...).
SKETCHCORE_API const char* dtype_name(DType dtype) noexcept;

/// Returns the size of one element of `dtype` in bytes.
SKETCHCORE_API std::size_t dtype_size(DType dtype) noexcept;

/// Kind of memory a tensor lives in.
enum class DeviceType : std::uint8_t {
  cpu,   ///< host memory
  cuda,  ///< CUDA device memory
};

/// A device: its kind and ordinal (always 0 for the CPU).
struct Device {
  DeviceType type = DeviceType::cpu;  ///< kind of device
  int index = 0;                      ///< device ordinal

  /// Two devices are equal when kind and ordinal match.
  friend bool operator==(const Device& a, const Device& b) noexcept {
    return a.type == b.type && a.index == b.index;
  }
  /// Negation of operator==.
  friend bool operator!=(const Device& a, const Device& b) noexcept { return !(a == b); }
};

/// Returns a readable name of `device` ("cpu", "cuda:1").
SKETCHCORE_API std::string device_name(const Device& device);

/// A non-owning view of a strided, n-dimensional array.
///
/// Shape and strides are counted in elements (as in DLPack), strides may be negative or
/// zero, and an empty stride vector means compact row-major (C order). The view never
/// owns or frees `data`; the caller keeps the memory alive while the view is used.
class SKETCHCORE_API TensorView {
 public:
  /// An empty, zero-dimensional float32 view with no data.
  TensorView() = default;

  /// Creates a view of `data` with the given element type, shape and strides.
  /// @param data    pointer to element (0, ..., 0); may be null only if the view is empty
  /// @param dtype   element type
  /// @param shape   extent of each dimension (each ≥ 0)
  /// @param strides element stride of each dimension; empty = compact row-major
  /// @param device  where `data` lives
  /// @throws shape_error if an extent is negative, `strides` and `shape` differ in length,
  ///        the element count overflows a signed 64-bit integer, or the byte distance
  ///        between the first and the last element does
  TensorView(void* data, DType dtype, std::vector<std::int64_t> shape,
             std::vector<std::int64_t> strides = {}, Device device = {});

  /// Pointer to element (0, ..., 0).
  void* data() const noexcept { return data_; }
  /// Element type.
  DType dtype() const noexcept { return dtype_; }
  /// Device holding the data.
  const Device& device() const noexcept { return device_; }
  /// Number of dimensions.
  int ndim() const noexcept { return static_cast<int>(shape_.size()); }
  /// Extent of every dimension.
  const std::vector<std::int64_t>& shape() const noexcept { return shape_; }
  /// Element stride of every dimension.
  const std::vector<std::int64_t>& strides() const noexcept { return strides_; }
  /// Extent of dimension `dim`; negative `dim` counts from the end.
  std::int64_t size(int dim) const;
  /// Element stride of dimension `dim`; negative `dim` counts from the end.
  std::int64_t stride(int dim) const;
  /// Total number of elements (1 for a zero-dimensional view).
  std::int64_t numel() const noexcept;
  /// True when the elements are compact and in row-major order.
  bool is_contiguous() const noexcept;

 private:
  bool numel_is_nonzero() const noexcept;
  bool offsets_fit() const noexcept;

  void* data_ = nullptr;
  DType dtype_ = DType::float32;
  Device device_{};
  std::vector<std::int64_t> shape_;
  std::vector<std::int64_t> strides_;
};

/// Returns "(2, 3, 4)"-style text for a shape, as used in error messages.
SKETCHCORE_API std::string shape_to_string(const std::vector<std::int64_t>& shape);

}  // namespace sketchcore
