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

/* 2: MoE problems ({"moe": ...} requests, their buffers and output definition); a version-1 library refuses them. */
#define QTUNE_PEER_ABI_VERSION 2

/* The library exports these functions and nothing else (it is built with hidden visibility). */
#define QTUNE_PEER_API __attribute__((visibility("default")))

/* QTUNE_PEER_ABI_VERSION of the library (an adapter refuses a library of another version). */
QTUNE_PEER_API int qtune_peer_abi_version(void);
/* The last failure on this thread as JSON; "{}" when none. */
QTUNE_PEER_API const char* qtune_peer_last_error(void);

typedef struct qtune_peer_problem qtune_peer_problem;

/* Random operands of one GEMM, quantized by qtune. request_json, a dense GEMM:
 *   {"operands": "w4a16-int4-ch" (a qtune format) | "f16" | "bf16" (dense, unquantized), "m": M, "n": N, "k": K,
 *    "seed": 1}
 * Weights are N(0, 0.02), activations N(0, 1) (as qtune's own kernels are checked), rounded or quantized by qtune.
 * Or a mixture-of-experts GEMM (kernels/moe.hpp, docs/moe.md):
 *   {"moe": MoeProblem::to_json() (format, experts, top_k, tokens, n, k, projection, layout, routing and its seed),
 *    "seed": 1}
 * with the very operands qtune's MoE provider (mma-moe) measures for that problem and seed: its routing,
 * make_moe_activations(problem, seed) and make_expert_weights(problem, e, seed) of every expert the routing touches
 * (only those: the others are never read, and E x N x K codes of every expert would be gigabytes). The layout in the
 * problem is the peer's to choose; the output is defined without it (qtune_peer_verify_*). */
QTUNE_PEER_API qtune_peer_problem* qtune_peer_problem_create(const char* request_json);
QTUNE_PEER_API void qtune_peer_problem_destroy(qtune_peer_problem* problem);

/* The problem as JSON: {"kind": "dense"|"moe", "operands", "m", "n", "k", "format": FormatSpec JSON or null,
 * "output_type": "f16"|"bf16", "tolerance", "buffers": {name: {"dtype": "uint8"|"uint16"|"int32"|"uint32"|"float32",
 * "shape": [rows, cols], "bytes"}}, "weight_scales": {"type", "rows", "cols", "rows_per_scale", "cols_per_scale"} (and
 * "activation_scales"), "global_scale"}. Buffers (row-major; those a problem lacks are absent):
 *   weight_codes        uint8  [N][K]  one code per byte, raw bits in the low bits (quantize.hpp)
 *   weight_scale_bits   uint32 [rows][cols] scale bit patterns in the scale type; weight_scale_values float32
 *   weight_zero_bits    uint32, weight_zero_values float32   (zero-point formats)
 *   activation_codes    uint8  [M][K]  (quantized activations); activation_scale_values float32 [rows][cols]
 *   activation_bits16   uint16 [M][K]  f16/bf16 bit patterns (16-bit activations, dense problems)
 *   weight_bits16       uint16 [N][K]  (dense problems only)
 *   weight_values       float32 [N][K] and activation_values float32 [M][K]: the dequantized values (made on first
 *                       request; for host-side test providers)
 * A MoE problem ("kind": "moe") adds "moe" (the problem's JSON), "experts", "top_k", "tokens", "projection",
 * "input_rows" (T for gate-up, T * top_k for down), "experts_touched" (ascending ids) and "expert_global_scales"
 * (one per touched expert, in that order); "m" is the output's rows (below) and "weight_scales" the layout of every
 * expert's scales. Its buffers:
 *   activation_codes / activation_scale_values / activation_bits16 / activation_values   [input_rows][K], as above
 *   topk_ids            int32  [T][top_k]  the expert of each (token, slot) pair p = token * top_k + slot
 *   router_weights      float32 [T][top_k] each token's weights, summing to 1
 *   touched_experts     int32  [touched][1] the ids in "experts_touched"
 *   expert<e>.weight_codes, expert<e>.weight_scale_bits, expert<e>.weight_scale_values, expert<e>.weight_zero_bits,
 *   expert<e>.weight_zero_values, expert<e>.weight_values   expert e's weights as the dense buffers above, for each
 *                       touched e (e.g. "expert17.weight_codes"; weight_values made on first request) */
QTUNE_PEER_API const char* qtune_peer_problem_describe(qtune_peer_problem* problem);
/* The host address and size of one buffer; valid while the problem lives. */
QTUNE_PEER_API int qtune_peer_problem_buffer(qtune_peer_problem* problem, const char* name, const void** data,
                                             size_t* bytes);

/* Fills `bytes` at a device address with 0xFF (NaN in f16 and bf16), synchronously, on device `device`. */
QTUNE_PEER_API int qtune_peer_poison_device(uint64_t device_address, size_t bytes, int device);
/* Checks an [M][N] output (f16 or bf16 as the problem's output_type, rows `row_stride` elements apart) against the CPU
 * reference (computed once per problem): JSON {"passed", "relative_error", "tolerance", "nan_count", "bad_count",
 * "summary"}. The device variant copies the output back first (synchronously, on device `device`).
 * A MoE problem's output is what qtune's token-indexed MoE kernel delivers, whatever layout the peer computes in:
 *   gate-up  [T * top_k][N], row p = token * top_k + slot: A[token] * W_{topk_ids[p]}^T (no router weight)
 *   down     [T][N], row t: sum over slots s, in slot order, of router_weights[t][s] * A[t * top_k + s] * W_{ids}^T
 *            (the top-k weighted reduction is part of the operation: a peer that computes pair rows reduces them)
 * and "m" in its description is that row count. */
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
