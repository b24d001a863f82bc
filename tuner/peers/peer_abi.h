/* qtune's measuring library for kernel providers written in another language: a C ABI that Python adapters load with
 * ctypes (tuner/peers/python/qtune_peers/abi.py), so no part of qtune is built against a Python version. It gives an
 * adapter what stays qtune's: the problem's operands from qtune's RTN quantizer, the output poison, verification
 * against qtune's CPU reference of the same quantized values, and measure() (CUPTI, cold L2, warm-up, statistics,
 * NVML). The adapter only packs the operands with its peer's helpers and launches the peer's kernel on the stream it
 * is given; the CUDA context is the device's primary context, which PyTorch uses too.
 *
 * Conventions: a function returns 0 or a non-null pointer on success, and -1 or NULL on failure, after which
 * qtune_peer_last_error() describes the failure as JSON {"error": "...", "error_type": "InputError", "library": ...}
 * (error_type as in the worker protocol: InputError, NoGpuError, UnsupportedError, LibraryError, DriverError, Error,
 * exception). Returned strings belong to the library and stay valid until the next call on the same thread. No
 * function lets a C++ exception through. */
#ifndef QTUNE_PEER_ABI_H
#define QTUNE_PEER_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QTUNE_PEER_ABI_VERSION 1

/* The library exports these functions and nothing else (it is built with hidden visibility). */
#define QTUNE_PEER_API __attribute__((visibility("default")))

/* QTUNE_PEER_ABI_VERSION of the library (an adapter refuses a library of another version). */
QTUNE_PEER_API int qtune_peer_abi_version(void);
/* The last failure on this thread as JSON; "{}" when none. */
QTUNE_PEER_API const char* qtune_peer_last_error(void);

typedef struct qtune_peer_problem qtune_peer_problem;

/* Random operands of one GEMM, quantized by qtune. request_json:
 *   {"operands": "w4a16-int4-ch" (a qtune format) | "f16" | "bf16" (dense, unquantized), "m": M, "n": N, "k": K,
 *    "seed": 1}
 * Weights are N(0, 0.02), activations N(0, 1) (as qtune's own kernels are checked), rounded or quantized by qtune. */
QTUNE_PEER_API qtune_peer_problem* qtune_peer_problem_create(const char* request_json);
QTUNE_PEER_API void qtune_peer_problem_destroy(qtune_peer_problem* problem);

/* The problem as JSON: {"operands", "m", "n", "k", "format": FormatSpec JSON or null, "output_type": "f16"|"bf16",
 * "tolerance", "buffers": {name: {"dtype": "uint8"|"uint16"|"uint32"|"float32", "shape": [rows, cols],
 * "bytes"}}, "weight_scales": {"type", "rows", "cols", "rows_per_scale", "cols_per_scale"} (and
 * "activation_scales"), "global_scale"}. Buffers (row-major; those a problem lacks are absent):
 *   weight_codes        uint8  [N][K]  one code per byte, raw bits in the low bits (quantize.hpp)
 *   weight_scale_bits   uint32 [rows][cols] scale bit patterns in the scale type; weight_scale_values float32
 *   weight_zero_bits    uint32, weight_zero_values float32   (zero-point formats)
 *   activation_codes    uint8  [M][K]  (quantized activations); activation_scale_values float32 [rows][cols]
 *   activation_bits16   uint16 [M][K]  f16/bf16 bit patterns (16-bit activations, dense problems)
 *   weight_bits16       uint16 [N][K]  (dense problems only)
 *   weight_values       float32 [N][K] and activation_values float32 [M][K]: the dequantized values (made on first
 *                       request; for host-side test providers) */
QTUNE_PEER_API const char* qtune_peer_problem_describe(qtune_peer_problem* problem);
/* The host address and size of one buffer; valid while the problem lives. */
QTUNE_PEER_API int qtune_peer_problem_buffer(qtune_peer_problem* problem, const char* name, const void** data,
                                             size_t* bytes);

/* Fills `bytes` at a device address with 0xFF (NaN in f16 and bf16), synchronously, on device `device`. */
QTUNE_PEER_API int qtune_peer_poison_device(uint64_t device_address, size_t bytes, int device);
/* Checks an [M][N] output (f16 or bf16 as the problem's output_type, rows `row_stride` elements apart) against the CPU
 * reference (computed once per problem): JSON {"passed", "relative_error", "tolerance", "nan_count", "bad_count",
 * "summary"}. The device variant copies the output back first (synchronously, on device `device`). */
QTUNE_PEER_API const char* qtune_peer_verify_device(qtune_peer_problem* problem, uint64_t device_address,
                                                    int64_t row_stride, int device);
QTUNE_PEER_API const char* qtune_peer_verify_host(qtune_peer_problem* problem, const void* output,
                                                  int64_t row_stride);

/* Enqueues one operation on `stream` (a CUstream) without synchronising; returns 0, or non-zero when it failed. */
typedef int (*qtune_peer_launch)(void* user_data, uint64_t stream);
/* measure() of tuner/measure/measure.hpp on `launch`: options_json as measure_options_to_json writes it (absent fields
 * keep their defaults); returns the Measurement as JSON. A launch that returns non-zero ends the measurement with an
 * error. */
QTUNE_PEER_API const char* qtune_peer_measure(const char* options_json, qtune_peer_launch launch, void* user_data);

/* NULL while every CUDA context this process opened is healthy; the description of a sticky error (illegal address,
 * ...) otherwise: the process must exit, as qtune's worker does. Never opens a context. */
QTUNE_PEER_API const char* qtune_peer_sticky_error(void);
/* The device's DeviceInfo as JSON (opens its primary context). */
QTUNE_PEER_API const char* qtune_peer_device_info(int device);

#ifdef __cplusplus
}
#endif

#endif /* QTUNE_PEER_ABI_H */
