// In-place unnormalized fast Walsh–Hadamard transform along the rows of a row-major
// (length × width) block: every column is transformed, the inner loop runs over the
// width and vectorizes. O(length · log2(length) · width).
#pragma once

#include <cstdint>

namespace sketchcore::detail {

template <class T>
void fwht_rows(T* data, std::int64_t length, std::int64_t width) {
  for (std::int64_t half = 1; half < length; half *= 2) {
    for (std::int64_t block = 0; block < length; block += 2 * half) {
      for (std::int64_t i = block; i < block + half; ++i) {
        T* top = data + i * width;
        T* bottom = data + (i + half) * width;
        for (std::int64_t c = 0; c < width; ++c) {
          const T a = top[c], b = bottom[c];
          top[c] = a + b;
          bottom[c] = a - b;
        }
      }
    }
  }
}

}  // namespace sketchcore::detail
