// SPDX-License-Identifier: Apache-2.0
//
// afd_plugin._C_ascend: the NPU (PrivateUse1) kernels of afd_ascend::a2e and
// afd_ascend::e2a.
//
// The schemas are defined once, in Python, by
// plugin/afd_plugin/connectors/npu/cam_p2p_ops.py (torch.library "DEF"); this
// file only adds implementations (TORCH_LIBRARY_IMPL) and must never define
// them again. Loading it before or after that module is fine: the dispatcher
// holds an implementation until its schema is defined.
//
// What the binding does: check the call against the contract cam_p2p_ops.py
// documents, allocate the outputs with the shapes of its shape functions
// (_a2e_shape / _e2a_shape) on the input's device, and hand raw pointers and
// the current NPU stream to the launch functions of afd_cam_p2p_kernels.h.
// Those kernels are not in this repository: without a library defining them
// (AFD_ASCEND_KERNEL_LIB, which makes setup.py define
// AFD_CAM_P2P_KERNELS_LINKED) this file does not compile.

#include <torch/extension.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "afd_cam_p2p_kernels.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

#ifndef AFD_CAM_P2P_KERNELS_LINKED
#error "afd_plugin._C_ascend needs the AscendC CAM P2P kernels (afd_cam_p2p_a2e_launch and afd_cam_p2p_e2a_launch, declared in afd_cam_p2p_kernels.h), which are not in this repository: build them with CANN's AscendC toolchain, set AFD_ASCEND_KERNEL_LIB to the library and build with AFD_BUILD_ASCEND_OPS=1 (setup.py then defines AFD_CAM_P2P_KERNELS_LINKED). See csrc/README.md."
#endif

namespace afd_plugin_ascend {
namespace {

// Slots of the widest FFN group: ceil(A / F) (max_slots in cam_p2p_ops.py).
int64_t max_slots(int64_t attention, int64_t ffn) {
  return (attention + ffn - 1) / ffn;
}

// Slots FFN rank `rank` serves: len(range(rank, A, F)) (group_slots).
int64_t group_slots(int64_t rank, int64_t attention, int64_t ffn) {
  return rank < attention ? (attention - rank + ffn - 1) / ffn : 0;
}

// The CamCall fields, checked; `group` owns the string group_ep points into.
AfdCamCall make_call(const char* op, int64_t batch_size, int64_t hidden_size,
                     int64_t topk, int64_t expert_rank_size,
                     int64_t attention_rank_size, int64_t rank,
                     const std::string& group, int64_t aiv_num) {
  TORCH_CHECK(expert_rank_size > 0 && attention_rank_size > 0, "afd_ascend::",
              op, ": expert_rank_size (", expert_rank_size,
              ") and attention_rank_size (", attention_rank_size,
              ") must be positive");
  TORCH_CHECK(rank >= 0 && rank < expert_rank_size + attention_rank_size,
              "afd_ascend::", op, ": rank ", rank, " is outside the ",
              expert_rank_size + attention_rank_size,
              " ranks (FFN ranks first)");
  TORCH_CHECK(batch_size >= 0 && hidden_size > 0 && topk >= 0 && aiv_num > 0,
              "afd_ascend::", op, ": batch_size (", batch_size,
              ") and topk (", topk, ") must be non-negative, hidden_size (",
              hidden_size, ") and aiv_num (", aiv_num, ") positive");
  TORCH_CHECK(!group.empty(), "afd_ascend::", op, ": group_ep is empty");
  return AfdCamCall{batch_size,          hidden_size, topk,
                    expert_rank_size,    attention_rank_size, rank,
                    group.c_str(),       aiv_num};
}

void check_activation(const char* op, const char* name, const at::Tensor& t,
                      int64_t rows, int64_t hidden_size) {
  TORCH_CHECK(t.scalar_type() == at::kBFloat16, "afd_ascend::", op, ": ", name,
              " must be bfloat16, got ", t.scalar_type());
  TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == hidden_size,
              "afd_ascend::", op, ": ", name, " must be (", rows, ", ",
              hidden_size, "), got ", t.sizes());
  TORCH_CHECK(t.is_contiguous(), "afd_ascend::", op, ": ", name,
              " must be contiguous");
}

void* current_stream() {
  return static_cast<void*>(c10_npu::getCurrentNPUStream().stream());
}

std::vector<at::Tensor> a2e_npu(
    const at::Tensor& x, const std::optional<at::Tensor>& expert_ids,
    const std::optional<at::Tensor>& scales, int64_t batch_size,
    int64_t hidden_size, int64_t topk, int64_t expert_rank_size,
    int64_t attention_rank_size, int64_t rank, c10::string_view group_ep,
    int64_t aiv_num, bool compute_gate) {
  const std::string group(group_ep.data(), group_ep.size());
  const AfdCamCall call =
      make_call("a2e", batch_size, hidden_size, topk, expert_rank_size,
                attention_rank_size, rank, group, aiv_num);
  const bool is_ffn = rank < expert_rank_size;
  // Attention pushes batch_size rows; FFN passes a placeholder of none.
  check_activation("a2e", "x", x, is_ffn ? x.size(0) : batch_size,
                   hidden_size);
  TORCH_CHECK(!compute_gate && !expert_ids.has_value() && !scales.has_value(),
              "afd_ascend::a2e: the CAM P2P ops run the gate on the FFN side "
              "(compute_gate false, no expert ids or scales)");

  const int64_t rows =
      is_ffn ? batch_size *
                   group_slots(rank, attention_rank_size, expert_rank_size)
             : 0;
  const auto on = x.options();
  at::Tensor expand_x = at::empty({rows, hidden_size}, on.dtype(at::kBFloat16));
  at::Tensor ids = at::empty({rows, topk}, on.dtype(at::kInt));
  at::Tensor weights = at::empty({rows, topk}, on.dtype(at::kFloat));
  at::Tensor handle = at::zeros(
      {max_slots(attention_rank_size, expert_rank_size)}, on.dtype(at::kInt));
  at::Tensor valid = at::empty({rows}, on.dtype(at::kBool));

  const AfdCamA2eBuffers buffers{x.data_ptr(),        nullptr,
                                 nullptr,             expand_x.data_ptr(),
                                 ids.data_ptr(),      weights.data_ptr(),
                                 handle.data_ptr(),   valid.data_ptr(),
                                 x.size(0),           rows};
  const int32_t status =
      afd_cam_p2p_a2e_launch(&call, &buffers, compute_gate, current_stream());
  TORCH_CHECK(status == 0, "afd_ascend::a2e: the kernel launch failed on rank ",
              rank, " (group_ep ", group, "): error ", status);
  return {expand_x, ids, weights, handle, valid};
}

at::Tensor e2a_npu(const at::Tensor& expand_x,
                   const at::Tensor& atten_batch_size, int64_t batch_size,
                   int64_t hidden_size, int64_t topk, int64_t expert_rank_size,
                   int64_t attention_rank_size, int64_t rank,
                   c10::string_view group_ep, int64_t aiv_num) {
  const std::string group(group_ep.data(), group_ep.size());
  const AfdCamCall call =
      make_call("e2a", batch_size, hidden_size, topk, expert_rank_size,
                attention_rank_size, rank, group, aiv_num);
  const bool is_ffn = rank < expert_rank_size;
  // FFN returns the rows a2e gathered; attention passes a placeholder.
  check_activation(
      "e2a", "expand_x", expand_x,
      is_ffn ? batch_size *
                   group_slots(rank, attention_rank_size, expert_rank_size)
             : expand_x.size(0),
      hidden_size);
  const int64_t slots = max_slots(attention_rank_size, expert_rank_size);
  TORCH_CHECK(atten_batch_size.scalar_type() == at::kInt &&
                  atten_batch_size.dim() == 1 &&
                  atten_batch_size.size(0) == slots &&
                  atten_batch_size.is_contiguous(),
              "afd_ascend::e2a: atten_batch_size must be the handle a2e "
              "returned, a contiguous int32 tensor of ",
              slots, " slots; got ", atten_batch_size.scalar_type(), " ",
              atten_batch_size.sizes());
  TORCH_CHECK(atten_batch_size.device() == expand_x.device(),
              "afd_ascend::e2a: atten_batch_size is on ",
              atten_batch_size.device(), ", expand_x on ", expand_x.device());

  const int64_t rows = is_ffn ? 0 : batch_size;
  at::Tensor out = at::empty({rows, hidden_size},
                             expand_x.options().dtype(at::kBFloat16));
  const AfdCamE2aBuffers buffers{expand_x.data_ptr(),
                                 atten_batch_size.data_ptr(), out.data_ptr(),
                                 expand_x.size(0), rows};
  const int32_t status = afd_cam_p2p_e2a_launch(&call, &buffers,
                                                current_stream());
  TORCH_CHECK(status == 0, "afd_ascend::e2a: the kernel launch failed on rank ",
              rank, " (group_ep ", group, "): error ", status);
  return out;
}

}  // namespace
}  // namespace afd_plugin_ascend

// Implementations only: the schemas belong to cam_p2p_ops.py.
TORCH_LIBRARY_IMPL(afd_ascend, PrivateUse1, m) {
  m.impl("a2e", TORCH_FN(afd_plugin_ascend::a2e_npu));
  m.impl("e2a", TORCH_FN(afd_plugin_ascend::e2a_npu));
}

// Importing afd_plugin._C_ascend runs the registration above; the module
// itself exports nothing.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() =
      "NPU kernels of afd_ascend::a2e and afd_ascend::e2a (schemas defined by "
      "afd_plugin.connectors.npu.cam_p2p_ops)";
}
