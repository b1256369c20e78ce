/* sketchcore's own declarations of the DLPack C ABI (DLPack 1.x), written from the
 * specification so that the bindings need no third-party header. Layouts must match the
 * specification byte for byte: they are shared with every producer and consumer. */
#ifndef SKETCHCORE_DLPACK_ABI_H
#define SKETCHCORE_DLPACK_ABI_H

#include <stdint.h>

#define SC_DLPACK_MAJOR_VERSION 1
#define SC_DLPACK_MINOR_VERSION 1

/* DLDeviceType values used by sketchcore. */
#define SC_DL_CPU 1
#define SC_DL_CUDA 2
#define SC_DL_CUDA_HOST 3
#define SC_DL_CUDA_MANAGED 13

/* DLDataTypeCode values. */
#define SC_DL_INT 0
#define SC_DL_UINT 1
#define SC_DL_FLOAT 2
#define SC_DL_OPAQUE_HANDLE 3
#define SC_DL_BFLOAT 4
#define SC_DL_COMPLEX 5
#define SC_DL_BOOL 6

/* DLManagedTensorVersioned.flags bits. */
#define SC_DLPACK_FLAG_READ_ONLY 1ULL
#define SC_DLPACK_FLAG_IS_COPIED 2ULL

typedef struct {
  int32_t device_type;
  int32_t device_id;
} DLDevice;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides; /* NULL means compact row-major */
  uint64_t byte_offset;
} DLTensor;

/* Legacy (unversioned) managed tensor: capsule name "dltensor". */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* Versioned managed tensor (DLPack >= 1.0): capsule name "dltensor_versioned".
 * Starts with `version`; it is not layout-compatible with DLManagedTensor. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif /* SKETCHCORE_DLPACK_ABI_H */
