// SPDX-License-Identifier: Apache-2.0
// Model::load: the family dispatch. config.json says which family a checkpoint is (V4.1's is the
// composite text_config layout or a deepseek_v41_text config); everything else is V4's. The device
// dispatch too: ModelOptions::device = kCuda loads the CUDA backend's model (when the build has it).
#include <filesystem>
#include <vector>

#include "deepinfer/check.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"
#include "deepinfer/model_v41.h"
#include "model/config_json.h"
#include "model/forward.h"
#if DI_HAVE_CUDA
#include "backends/cuda/ep/cuda_ep_model.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_model.h"
#endif

namespace deepinfer {

Device parse_device(std::string_view name) {
    if (name == "cpu") return Device::kCpu;
    if (name == "cuda") return Device::kCuda;
    DI_THROW("unknown device '", name, "' (expected cpu or cuda)");
}

namespace {

// The Engram token map's tokenizer: the option, the checkpoint's own, else the bundled one.
ModelOptions with_engram_tokenizer(const std::string& dir, const ModelOptions& options) {
    ModelOptions o = options;
    if (o.tokenizer_json.empty())
        o.tokenizer_json = std::filesystem::exists(dir + "/tokenizer.json")
                               ? dir + "/tokenizer.json"
                               : std::string(DI_ASSETS_DIR) + "/tokenizer/deepseek-v4/tokenizer.json";
    return o;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& dir, const ModelOptions& options) {
    const std::string config = dir + "/config.json";
    const bool v41 = std::filesystem::exists(config) && is_v41_config(config_json::read_config_file(config));
    if (options.device == Device::kCuda) {
#if DI_HAVE_CUDA
        cuda::CudaModelOptions co;
        co.max_model_len = options.max_model_len;
        co.workspace_bytes = options.device_workspace_bytes;
        co.gemm = options.device_fast_gemm ? cuda::GemmMode::kFast : cuda::GemmMode::kReference;
        co.v41_fp8_native = options.device_fp8_native;
        DI_CHECK(options.gpus >= 1, "gpus per replica must be at least 1, not ", options.gpus);
        if (options.gpus > 1) {
            std::vector<int> devices;
            for (int g = 0; g < int(options.gpus); ++g) devices.push_back(g);
            if (!v41) return cuda::load_cuda_ep_model(dir, options, co, devices);
            const ModelOptions o41 = with_engram_tokenizer(dir, options);
            return cuda::load_cuda_ep_model(
                [&](const cuda::CudaModelOptions& o) {
                    auto m = cuda::load_cuda_v41_model(dir, o41, o);
                    const int64_t len = cuda::cuda_v41_model_max_len(*m);
                    return cuda::CudaRank{std::move(m), len};
                },
                co, devices);
        }
        if (v41) return cuda::load_cuda_v41_model(dir, with_engram_tokenizer(dir, options), co);
        return cuda::load_cuda_model(dir, options, co);
#else
        DI_THROW("this build has no CUDA backend (nvcc was not found at configure time)");
#endif
    }
    DI_CHECK(options.gpus == 1, "gpus per replica (", options.gpus, ") > 1 needs --device cuda");
    if (v41) return V41Model::load(dir, with_engram_tokenizer(dir, options));
    DI_CHECK(!options.v41_bounded_replay, dir, ": bounded replay is a DeepSeek-V4.1 option; this is a V4 checkpoint");
    return load_v4_model(dir, options);
}

}  // namespace deepinfer
