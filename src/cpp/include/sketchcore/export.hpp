/// @file export.hpp
/// @brief Symbol visibility macro for the public sketchcore API.
#pragma once

/// Marks a declaration as part of libsketchcore's exported ABI. The library is built with
/// hidden visibility by default, so only declarations carrying this macro are exported.
#if defined(SKETCHCORE_STATIC)
#define SKETCHCORE_API
#elif defined(_WIN32)
#if defined(SKETCHCORE_BUILDING_LIBRARY)
#define SKETCHCORE_API __declspec(dllexport)
#else
#define SKETCHCORE_API __declspec(dllimport)
#endif
#else
#define SKETCHCORE_API __attribute__((visibility("default")))
#endif
