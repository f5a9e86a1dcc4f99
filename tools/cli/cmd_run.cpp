// SPDX-License-Identifier: Apache-2.0
// `deepinfer run`: the main job. OpenAI Batch API input -> engine -> OpenAI batch output.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "deepinfer/check.h"
#include "deepinfer/embedded.h"
#include "deepinfer/hub.h"
#include "deepinfer/log.h"
#include "deepinfer/model.h"
#include "deepinfer/parallel.h"
#include "deepinfer/tokenizer.h"
#include "dist/communicator.h"
#include "engine/batch_runner.h"
#include "engine/distributed_batch.h"
#include "engine/speculative/report.h"

namespace deepinfer::cli {

std::string default_cache_dir() {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/deepinfer";
    if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/deepinfer";
    return (std::filesystem::temp_directory_path() / "deepinfer-cache").string();
}

// The tokenizer: --tokenizer, else the model directory's tokenizer.json, else the DeepSeek V4
// tokenizer shipped in assets/ (the embedded model's).
std::string resolve_tokenizer(const std::string& flag, const std::string& model_dir) {
    if (!flag.empty()) return flag;
    if (!model_dir.empty() && std::filesystem::exists(model_dir + "/tokenizer.json")) return model_dir + "/tokenizer.json";
    for (const std::string& dir : {std::string(DI_ASSETS_DIR), std::string("assets")}) {
        const std::string p = dir + "/tokenizer/deepseek-v4/tokenizer.json";
        if (std::filesystem::exists(p)) return p;
    }
    DI_THROW("no tokenizer found: pass --tokenizer FILE (tokenizer.json)");
}

namespace {

struct RunOptions {
    std::string model, revision, tokenizer, input, output, family = "auto", numerics, progress = "auto", cache_dir,
        device = "cpu";
    bool resume = false, async = false, no_async = false, no_prefix_cache = false, no_cuda_graphs = false, no_pdl = false,
         host_sampling = false;
    int64_t max_num_seqs = 64, max_batched_tokens = 2048, max_prefill_chunk = 512, default_max_tokens = 256;
    double state_memory_gib = 4.0, device_workspace_gib = 0.0, device_state_gib = 0.0;
    int64_t max_model_len = 0, gpus_per_replica = 1;
    std::string gemm = "reference";
    uint64_t seed = 0;
    std::string speculative = "none";
    int64_t num_speculative_tokens = 3;
    bool spec_scheduler = false, spec_one_hot = false, spec_block = false;
    std::string spec_trace;  // JSON lines of the confidence scheduler's decode steps ("": none)
};

// The host's ranks resolve the model one after another's first: local rank 0 generates the built-in
// model or downloads a Hub snapshot, then the others find it in the cache.
std::string resolve_model(const RunOptions& o, Communicator* comm, bool embedded, std::string& name) {
    std::string dir = o.model;
    name = o.model;
    if (comm && comm->local_rank() != 0) comm->barrier();
    if (embedded) {
        name = dir.empty() ? std::string(kEmbeddedDefault) : dir;
        dir = ensure_embedded_model(o.cache_dir.empty() ? default_cache_dir() : o.cache_dir, name);
        if (!comm || comm->rank() == 0)
            DI_LOG_INFO("using the built-in tiny random-weight model {} ({}): its text is random by design", name, dir);
    } else {
        dir = resolve_model_dir(o.model, o.revision, cli_hub_options());
    }
    if (comm && comm->local_rank() == 0) comm->barrier();
    return dir;
}

// One replica's resources under mpirun: its share of the host's cores (unless set) and GPUs.
void place_replica(const RunOptions& o, const Communicator& comm) {
    // Threads: --threads when given (not the default, one per core), else OMP_NUM_THREADS, else the
    // host's cores shared between its ranks.
    if (cpu_num_threads() == cpu_num_cores()) {
        const char* env = std::getenv("OMP_NUM_THREADS");
        const int from_env = env ? std::atoi(env) : 0;
        set_cpu_num_threads(from_env > 0 ? from_env : std::max(1, cpu_num_cores() / std::max(1, comm.local_size())));
    }
    if (o.device == "cpu") {
        if (o.gpus_per_replica != 1) DI_LOG_WARN("--gpus-per-replica has no effect with --device cpu");
        return;
    }
    // The replica's GPUs: the next G of the host's (of CUDA_VISIBLE_DEVICES when it is set).
    std::vector<std::string> gpus;
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) {
        std::string s = v;
        for (size_t p = 0; p <= s.size();) {
            const size_t q = std::min(s.find(',', p), s.size());
            gpus.push_back(s.substr(p, q - p));
            p = q + 1;
        }
    }
    const int64_t first = int64_t(comm.local_rank()) * o.gpus_per_replica;
    std::string mine;
    for (int64_t g = first; g < first + o.gpus_per_replica; ++g) {
        if (!gpus.empty()) DI_CHECK(g < int64_t(gpus.size()), "replica ", comm.rank(), " needs GPU ", g,
                                   " of CUDA_VISIBLE_DEVICES=", std::getenv("CUDA_VISIBLE_DEVICES"));
        mine += (mine.empty() ? "" : ",") + (gpus.empty() ? std::to_string(g) : gpus[size_t(g)]);
    }
    ::setenv("CUDA_VISIBLE_DEVICES", mine.c_str(), 1);
}

int run_job(const RunOptions& o, Communicator* comm) {
    if (comm && !o.resume) check_no_batch_output(o.output);  // before the model loads (checked again later)
    if (comm) place_replica(o, *comm);
    const bool embedded = o.model.empty() || is_embedded_model_name(o.model);
    std::string name;
    const std::string dir = resolve_model(o, comm, embedded, name);
    ModelOptions mo;
    if (!o.numerics.empty()) {
        mo.numerics_from_checkpoint = false;
        mo.numerics = parse_numerics(o.numerics);
    }
    const std::string tokenizer_path = resolve_tokenizer(o.tokenizer, embedded ? std::string() : dir);
    mo.tokenizer_json = tokenizer_path;  // V4.1: the Engram token map comes from the same tokenizer
    mo.device = parse_device(o.device);
    mo.max_model_len = o.max_model_len;
    mo.device_workspace_bytes = static_cast<uint64_t>(o.device_workspace_gib * double(uint64_t{1} << 30));
    mo.device_state_bytes = static_cast<uint64_t>(o.device_state_gib * double(uint64_t{1} << 30));
    mo.device_fast_gemm = o.gemm == "fast" || o.gemm == "fast-fp8";
    mo.device_fp8_native = o.gemm == "fast-fp8";
    mo.max_batch_tokens = o.max_batched_tokens;
    mo.max_num_seqs = o.max_num_seqs;
    mo.cuda_graphs = !o.no_cuda_graphs;
    mo.cuda_pdl = !o.no_pdl;
    if (mo.device == Device::kCuda) mo.gpus = o.gpus_per_replica;  // > 1: expert parallelism across them
    // The engine gives each GPU of an expert-parallel replica an equal share of a step's tokens
    // (Model::placement_groups): one GPU's forward holds at most that share.
    if (mo.gpus > 1) mo.max_batch_tokens = (o.max_batched_tokens + mo.gpus - 1) / mo.gpus;
    else if (o.gpus_per_replica != 1 && !comm) DI_LOG_WARN("--gpus-per-replica has no effect with --device cpu");
    std::shared_ptr<const Model> model = Model::load(dir, mo);
    auto tok = std::make_shared<const Tokenizer>(Tokenizer::from_file(tokenizer_path));
    // A tokenizer with more ids than the model (a tiny test model) still decodes every sampled id;
    // a prompt that encodes to an id outside the model is that request's error.
    if (tok->vocab_size() > model->info().vocab_size)
        DI_LOG_WARN("the tokenizer has {} ids, the model's vocabulary {}: prompts using the others are rejected",
                    tok->vocab_size(), model->info().vocab_size);
    // Chat format: the model's family, except that V4.1's needs <｜System｜>, which a V4 tokenizer
    // (the bundled one, used by the embedded model) lacks; then V4's format is used.
    std::string family = o.family;
    if (family == "auto")
        family = model->info().family == "deepseek_v41" && tok->added_token_id("<｜System｜>") ? "v41" : "v4";
    EngineConfig ec;
    ec.max_num_seqs = o.max_num_seqs;
    ec.max_num_batched_tokens = o.max_batched_tokens;
    ec.max_prefill_chunk = o.max_prefill_chunk;
    ec.state_memory_bytes = static_cast<uint64_t>(o.state_memory_gib * double(uint64_t{1} << 30));
    ec.prefix_caching = !o.no_prefix_cache;
    // Async by default on the GPU: the host post-processes a step while the device runs the next.
    ec.async_scheduling = !o.no_async && (o.async || mo.device == Device::kCuda);
    ec.device_sampling = !o.host_sampling;
    ec.job_seed = o.seed;
    ec.speculative_method = o.speculative;
    ec.num_speculative_tokens = o.num_speculative_tokens;
    ec.speculative_scheduler = o.spec_scheduler;
    ec.speculative_sample_drafts = !o.spec_one_hot;
    ec.speculative_block_verification = o.spec_block;
    // --spec-trace FILE (under mpirun: FILE.<rank>): one JSON line per decode step the scheduler learns from.
    std::ofstream trace;
    if (!o.spec_trace.empty()) {
        const std::string path = comm && comm->size() > 1 ? fmt::format("{}.{}", o.spec_trace, comm->rank()) : o.spec_trace;
        trace.open(path);
        if (!trace) DI_THROW("--spec-trace: cannot write ", path);
        ec.speculative_trace = [&trace](const SpeculativeTraceStep& t) { trace << speculative_trace_line(t) << '\n'; };
    }
    BatchRunOptions ro;
    ro.input_path = o.input;
    ro.output_path = o.output;
    ro.model_name = name;
    ro.resume = o.resume;
    ro.family = parse_chat_family(family);
    ro.default_max_tokens = o.default_max_tokens;
    ro.progress = o.progress == "always" ? BatchRunOptions::Progress::kAlways
                  : o.progress == "never" ? BatchRunOptions::Progress::kNever
                                           : BatchRunOptions::Progress::kAuto;
    const BatchRunSummary s = comm ? run_batch_distributed(ro, *comm, model, tok, ec) : run_batch(ro, model, tok, ec);
    if (comm && comm->rank() != 0) return 0;  // rank 0 prints the job's summary
    const EngineMetrics& m = s.engine;
    std::fprintf(stderr,
                 "summary: %lld requests (%lld completed, %lld errors, %lld already done), %lld prompt tokens, "
                 "%lld completion tokens, %.2f s, %.1f completion tok/s, %.1f total tok/s, prefix-cache hit rate "
                 "%.1f%%, %lld preemptions, peak state %.1f MiB, forward share of step time %.1f%%%s\n",
                 (long long)s.lines, (long long)s.completed, (long long)s.errors, (long long)s.skipped_done,
                 (long long)s.prompt_tokens, (long long)s.completion_tokens, s.seconds,
                 s.seconds > 0 ? double(s.completion_tokens) / s.seconds : 0.0,
                 s.seconds > 0 ? double(s.prompt_tokens + s.completion_tokens) / s.seconds : 0.0,
                 100.0 * m.prefix_hit_rate(), (long long)m.preemptions, double(m.state_bytes_peak) / (1 << 20),
                 m.step_seconds > 0 ? 100.0 * m.forward_seconds / m.step_seconds : 0.0,
                 comm ? fmt::format(", {} replicas", comm->size()).c_str() : "");
    if (const std::string spec = speculative_summary(m); !spec.empty()) std::fprintf(stderr, "%s\n", spec.c_str());
    return 0;
}

}  // namespace

Command register_run(CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* sub = app.add_subcommand("run", "Run an OpenAI Batch API file (JSONL) and write the batch output file");
    sub->add_option("--model", o->model, "Checkpoint directory, Hugging Face repo id (org/name, through the HF cache), "
                                         "or embedded:v41 (the default: a built-in tiny random-weight DeepSeek-V4.1 "
                                         "model) or embedded:v4");
    sub->add_option("--revision", o->revision, "Hub revision (branch, tag or commit) of a repo id (default main)");
    sub->add_option("--tokenizer", o->tokenizer, "tokenizer.json (default: the model's, else the bundled DeepSeek one)");
    sub->add_option("--input", o->input, "Input JSONL: {custom_id, method, url, body} per line")->required();
    sub->add_option("--output", o->output, "Output JSONL: {id, custom_id, response, error} per request")->required();
    sub->add_flag("--resume", o->resume, "Continue an interrupted run: skip custom_ids already in the output");
    sub->add_option("--family", o->family, "Chat format: v4 | v41 | auto (the model's, if the tokenizer has its tokens)")->capture_default_str();
    sub->add_option("--numerics", o->numerics, "exact | official (default: official for FP8/FP4 checkpoints)");
    sub->add_option("--device", o->device, "cpu | cuda: where the model runs (the engine is the same)")->capture_default_str();
    sub->add_option("--max-model-len", o->max_model_len, "cuda: longest sequence held on the GPU (0: min(context, 65536))");
    sub->add_option("--device-workspace-gib", o->device_workspace_gib,
                    "cuda: scratch of one forward step, allocated at start-up (0: sized from --max-batched-tokens, "
                    "--max-num-seqs and --max-model-len)")->capture_default_str();
    sub->add_option("--device-state-gib", o->device_state_gib,
                    "cuda: the device page pool of sequence state and prefix snapshots, allocated at "
                    "start-up (0: --max-num-seqs sequences of --max-model-len tokens, within 90% of the free memory)")
        ->capture_default_str();
    sub->add_flag("--no-cuda-graphs", o->no_cuda_graphs, "cuda: launch decode steps kernel by kernel (same results)");
    sub->add_flag("--no-pdl", o->no_pdl,
                  "cuda: no programmatic dependent launch (each kernel starts after the previous one ends; same results)");
    sub->add_flag("--host-sampling", o->host_sampling, "cuda: sample on the CPU from copied logits (same results)");
    sub->add_option("--gemm", o->gemm,
                    "cuda: reference (bit-identical to the CPU) | fast (tensor cores, within tolerance) | fast-fp8 "
                    "(fast; V4.1's dense FP8 linears stay FP8 on Hopper)")
        ->capture_default_str()->check(CLI::IsMember({"reference", "fast", "fast-fp8"}));
    sub->add_option("--max-num-seqs", o->max_num_seqs, "Sequences per step (default: cpu 64, cuda 256 per GPU of the replica)")
        ->check(CLI::Range(1, 65536));
    sub->add_option("--max-batched-tokens", o->max_batched_tokens, "Token budget per step, split equally over the GPUs of a replica (default: cpu 2048, cuda 8192 per GPU)")
        ->check(CLI::Range(1, 1 << 24));
    sub->add_option("--max-prefill-chunk", o->max_prefill_chunk, "Largest prefill chunk (default: cpu 512, cuda 8192)")
        ->check(CLI::Range(1, 1 << 24));
    sub->add_option("--state-memory-gib", o->state_memory_gib,
                    "Sequence-state memory budget (default: cpu 4; cuda: the device page pool, --device-state-gib)");
    sub->add_option("--default-max-tokens", o->default_max_tokens, "max_tokens when a body has none")->capture_default_str();
    sub->add_option("--seed", o->seed, "Job seed (requests without a seed derive theirs from it and custom_id)");
    sub->add_flag("--async", o->async, "Asynchronous scheduling: post-process a step while the next forward runs "
                                        "(same results; off by default on the CPU backend, where it competes for cores)");
    sub->add_flag("--no-async", o->no_async, "Synchronous scheduling (the default on the CPU backend; async is the "
                                              "default with --device cuda)");
    sub->add_flag("--no-prefix-cache", o->no_prefix_cache, "Disable prefix sharing (same results)");
    sub->add_option("--speculative", o->speculative, "Speculative decoding: none | mtp | dspark | auto (the checkpoint's drafter, if any)")->capture_default_str();
    sub->add_option("--num-speculative-tokens", o->num_speculative_tokens, "Drafts per request and step, at most")
        ->capture_default_str();
    sub->add_flag("--spec-scheduler", o->spec_scheduler, "Confidence-scheduled verify lengths (else all drafts)");
    sub->add_flag("--spec-one-hot-drafts", o->spec_one_hot, "Sampling requests: argmax drafts instead of sampled ones");
    sub->add_option("--spec-trace", o->spec_trace,
                    "Write the confidence scheduler's view of every step (rows, decode rows, drafts, accepted, measured "
                    "and predicted costs, expected gain; decode-only steps marked) as JSON lines to this file (under "
                    "mpirun: FILE.<rank>)");
    sub->add_flag("--spec-block-verify", o->spec_block,
                  "Sampling requests: block verification (exact; accepts at least as many drafts)");
    sub->add_option("--progress", o->progress, "auto | always | never")->capture_default_str();
    sub->add_option("--gpus-per-replica", o->gpus_per_replica,
                    "GPUs of one replica (--device cuda): more than 1 shards the routed experts across them "
                    "(expert parallelism over NCCL). Under mpirun each rank takes the next G GPUs of "
                    "its host")->capture_default_str()->check(CLI::Range(1, 64));
    sub->add_option("--cache-dir", o->cache_dir, "Where the built-in model is generated (default ~/.cache/deepinfer)");
    return [sub, o]() -> int {
        if (!sub->parsed()) return -1;
        // The GPU's defaults: whole-GPU batches and prefill chunks (a GPU step costs about the same
        // for 512 rows as for 4096, and every chunk reads the routed experts' weights once; 8192-token
        // steps give the routed experts 128 rows each on V4.1 instead of 64: prefill of 8K prompts
        // +16% on 12 V4.1 layers on the H200 against 4096, bench/results/cuda-session37-h200-call3-e2e.md,
        // for ~7 GB more workspace), and the state budget of the device page pool rather than a host-sized one.
        // Under expert parallelism the sequences and step tokens are per GPU of the replica.
        if (o->device == "cuda") {
            const int64_t g = std::max<int64_t>(1, o->gpus_per_replica);
            if (sub->get_option("--max-num-seqs")->count() == 0) o->max_num_seqs = 256 * g;
            if (sub->get_option("--max-batched-tokens")->count() == 0) o->max_batched_tokens = 8192 * g;
            if (sub->get_option("--max-prefill-chunk")->count() == 0) o->max_prefill_chunk = 8192;
            if (sub->get_option("--state-memory-gib")->count() == 0) o->state_memory_gib = 1 << 20;  // the pool bounds it
        }
        // NVLink multicast (NVLS) stays off for every NCCL communicator of this process: it can leave
        // shared GPUs unusable for days.
        ::setenv("NCCL_NVLS_ENABLE", "0", 1);
        // Under mpirun (N > 1 ranks) every rank is one replica; otherwise today's single process.
        std::unique_ptr<Communicator> comm;
        if (launch_environment().world_size > 1) comm = make_mpi_communicator();
        if (!comm) return run_job(*o, nullptr);
        try {
            return run_job(*o, comm.get());
        } catch (const std::exception& e) {
            const auto* de = dynamic_cast<const Error*>(&e);
            std::fprintf(stderr, "error: replica %d of %d: %s\n", comm->rank(), comm->size(),
                         de ? de->message().c_str() : e.what());
            comm->abort(1);  // the other ranks may be waiting in a collective
            return 1;
        }
    };
}

}  // namespace deepinfer::cli
