// File: sim/profile.h
// The engine profile: KV-cache geometry (and, for hybrid models, the KV-cache groups), scheduler
// limits and the per-step time model, loaded from YAML (sim/profiles/*.yaml, also built in by
// name). A value type; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvgate::sim {

/// The layer kind of a KV-cache group (vLLM's KVCacheSpec kinds the simulator models).
enum class KvGroupKind : uint8_t { kFullAttention, kSlidingWindow, kMamba };

/// vLLM's kv_cache_spec_kind names: "full_attention", "sliding_window", "mamba".
std::string_view KvGroupKindName(KvGroupKind kind);

/// One KV-cache group: vLLM keeps one per layer kind. All groups share the profile's block_size.
struct KvGroupSpec {
  KvGroupKind kind = KvGroupKind::kFullAttention;
  uint32_t sliding_window = 0;  // Tokens; kSlidingWindow only.
  uint32_t num_gpu_blocks = 0;  // This group's own pool.
};

/// Defaults are the 8B-on-one-H100 numbers of profiles/llama3-8b-h100.yaml (provenance there).
struct Profile {
  std::string name = "llama3-8b-h100";
  uint32_t block_size = 16;                // Tokens per KV block.
  uint32_t num_gpu_blocks = 26000;         // GPU block pool.
  uint32_t num_cpu_blocks = 0;             // Host tier (vLLM CPU offload); 0 disables it.
  uint32_t max_num_seqs = 256;             // Running sequences per step.
  uint32_t max_num_batched_tokens = 8192;  // Token budget per step (chunked prefill).
  uint32_t max_model_len = 131072;         // Prompt + output limit, as vLLM's --max-model-len.

  // Step time (seconds) = step_fixed_s
  //   + sum over prefill chunks of n * (prefill_per_token_s + prefill_per_token_ctx_s * mid_ctx)
  //   + decode_per_seq_s * decoding sequences + decode_per_kv_token_s * KV tokens they read
  //   + cpu_load_per_block_s * blocks loaded from the host tier.
  // mid_ctx is the context length at the middle of the chunk (attention cost grows with it).
  double step_fixed_s = 0.0065;
  double prefill_per_token_s = 7.0e-5;
  double prefill_per_token_ctx_s = 1.0e-9;
  double decode_per_seq_s = 3.0e-5;
  double decode_per_kv_token_s = 5.0e-8;
  double cpu_load_per_block_s = 2.0e-5;

  // External KV store (kvgate-sim --store): a block loaded from it costs
  // block_size * kv_bytes_per_token / store_bandwidth_bytes_per_s of step time (Llama-3-8B:
  // 128 KiB of KV a token; 10 GB/s, a 100 Gb/s RDMA NIC's order), while only
  // store_bytes_per_token real bytes a token travel through transfer/.
  uint64_t kv_bytes_per_token = 131072;
  double store_bandwidth_bytes_per_s = 1.0e10;
  uint32_t store_bytes_per_token = 16;

  // P/D disaggregation (--role): a decode pulls its prompt's KV from the prefill at
  // pd_bandwidth_bytes_per_s (25 GB/s: NIXL over a 200-400 Gb/s RDMA NIC) for kv_bytes_per_token
  // a token, in simulated time; store_bytes_per_token real bytes a token travel through transfer/.
  double pd_bandwidth_bytes_per_s = 2.5e10;

  // KV-cache groups of a hybrid model (profiles/gpt-oss-like.yaml). Empty: one full-attention
  // group of num_gpu_blocks whose events carry no group fields (today's encoding). Otherwise
  // groups[0] is full attention, num_gpu_blocks is its pool, and there is at most one other
  // group (sliding window or Mamba), whose hit rule is sim/kv_groups.h's.
  std::vector<KvGroupSpec> groups;

  /// The groups the engine runs: `groups`, or the one implicit full-attention group.
  std::vector<KvGroupSpec> KvGroups() const;
  /// Sets the full-attention pool to `n` blocks and scales the other groups' pools in proportion
  /// (at least 1 block each), as --num-gpu-blocks does.
  void SetNumGpuBlocks(uint32_t n);

  /// Checks ranges (kInvalidArgument naming the field).
  absl::Status Validate() const;
};

/// Loads a profile; absent keys keep the defaults above, unknown keys are an error.
/// @return kNotFound when the file cannot be read, kInvalidArgument for bad YAML or values.
absl::StatusOr<Profile> LoadProfile(const std::string& path);

/// Same, from YAML text.
absl::StatusOr<Profile> ParseProfile(const std::string& yaml);

/// The profiles built into the binary (sim/profiles/*.yaml, embedded at build time), by name:
/// llama3-8b-h100, gpt-oss-like, gemma3-like, qwen3-next-like.
std::vector<std::string> BuiltinProfileNames();

/// --profile's argument: a built-in profile's name, else a path (LoadProfile).
absl::StatusOr<Profile> LoadProfileByNameOrPath(const std::string& name_or_path);

}  // namespace kvgate::sim
