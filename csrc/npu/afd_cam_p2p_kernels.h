// SPDX-License-Identifier: Apache-2.0
//
// The launch functions the AscendC CAM P2P kernels must provide to
// afd_ascend_ops.cpp (the torch binding of afd_ascend::a2e / afd_ascend::e2a).
//
// Only this declaration is in the repository: the kernels, their op host
// files and tiling are not. A library defining these two functions, built
// with CANN's AscendC toolchain, is linked into afd_plugin._C_ascend through
// AFD_ASCEND_KERNEL_LIB (see csrc/README.md).
//
// The argument contract is the one plugin/afd_plugin/connectors/npu/
// cam_p2p_ops.py documents (CamCall and the schemas): FFN ranks first, FFN r
// is world rank r, attention a is world rank F + a and talks to FFN a % F in
// slot a // F. Every tensor is contiguous and on the current NPU device; the
// binding allocates every output with the shapes the Python shape functions
// give, so a kernel never allocates.
//
// C linkage and the afd_cam_p2p_ prefix keep the symbols apart from
// vllm-ascend's own _C extension and any CANN op library.

#ifndef AFD_CAM_P2P_KERNELS_H_
#define AFD_CAM_P2P_KERNELS_H_

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The arguments a2e and e2a share, in schema order (CamCall).
typedef struct AfdCamCall {
  int64_t batch_size;           // rows per slot
  int64_t hidden_size;
  int64_t topk;
  int64_t expert_rank_size;     // F
  int64_t attention_rank_size;  // A
  int64_t rank;                 // the caller's world rank, FFN ranks first
  const char* group_ep;         // the communicator, one per micro-batch stage
  int64_t aiv_num;              // vector cores the kernel may use
} AfdCamCall;

// a2e's inputs and outputs. On attention, x holds batch_size rows that are
// pushed into this rank's slot and the call returns at once; the outputs have
// zero rows. On FFN, x is a placeholder and the call waits for every slot the
// rank serves, writing their rows in slot order (gathered_rows =
// batch_size * slots served).
typedef struct AfdCamA2eBuffers {
  const void* x;                // [batch_size, hidden_size] bf16
  const void* expert_ids;       // [batch_size, topk] int32, or NULL
  const void* scales;           // [batch_size, topk] float32, or NULL
  void* expand_x;               // [gathered_rows, hidden_size] bf16
  void* expert_ids_out;         // [gathered_rows, topk] int32
  void* weights_out;            // [gathered_rows, topk] float32
  void* atten_batch_size;       // [ceil(A / F)] int32: the handle
  void* valid;                  // [gathered_rows] bool
  int64_t x_rows;               // rows of x
  int64_t gathered_rows;        // rows of the FFN-side outputs (0 on attention)
} AfdCamA2eBuffers;

// e2a's inputs and outputs. On FFN, expand_x holds the gathered rows and slot
// i goes back to attention r + i * F; out has zero rows. On attention, the
// call waits for its batch_size rows in out.
typedef struct AfdCamE2aBuffers {
  const void* expand_x;          // [gathered_rows, hidden_size] bf16
  const void* atten_batch_size;  // the handle a2e returned, [ceil(A / F)] int32
  void* out;                     // [batch_size or 0, hidden_size] bf16
  int64_t expand_rows;           // rows of expand_x
  int64_t out_rows;              // rows of out
} AfdCamE2aBuffers;

// Enqueue the operation on `stream` (an aclrtStream). Return 0 when it was
// enqueued, any other value (a CANN error code) when it was not.
int32_t afd_cam_p2p_a2e_launch(const AfdCamCall* call,
                               const AfdCamA2eBuffers* buffers,
                               bool compute_gate, void* stream);
int32_t afd_cam_p2p_e2a_launch(const AfdCamCall* call,
                               const AfdCamE2aBuffers* buffers, void* stream);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // AFD_CAM_P2P_KERNELS_H_
