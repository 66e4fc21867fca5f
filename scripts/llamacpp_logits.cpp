// llama.cpp's logits on given token ids, in the format of `kvshrink logits` (for
// scripts/compare-llamacpp-logits, which compiles this file against a llama.cpp build outside the
// repository: it is not part of kvshrink's build and uses only llama.cpp's public llama.h API).
//
//   llamacpp_logits MODEL.gguf IDS_FILE OUT.f32 GREEDY THREADS
//
// IDS_FILE: token ids separated by commas/whitespace/brackets. OUT.f32: float32 logits
// [n_pos][n_vocab]: one row per input id (one batch, every position output), then one row per
// greedy step (each step feeds the argmax of the previous row). Prints the same JSON line as
// `kvshrink logits`. F16 KV cache, no flash attention (llama.cpp's defaults).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

std::vector<llama_token> read_ids(const char* path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  for (char& c : s)
    if (c == ',' || c == '[' || c == ']') c = ' ';
  std::istringstream in(s);
  std::vector<llama_token> ids;
  long v;
  while (in >> v) ids.push_back(static_cast<llama_token>(v));
  return ids;
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s MODEL.gguf IDS_FILE OUT.f32 GREEDY THREADS\n", argv[0]);
    return 2;
  }
  const std::vector<llama_token> ids = read_ids(argv[2]);
  const int greedy = std::atoi(argv[4]), threads = std::atoi(argv[5]);
  if (ids.empty()) {
    std::fprintf(stderr, "%s: no token ids\n", argv[2]);
    return 1;
  }
  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "%s: cannot load\n", argv[1]);
    return 1;
  }
  const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_context_params cp = llama_context_default_params();
  const int n_total = static_cast<int>(ids.size()) + greedy;
  cp.n_ctx = static_cast<uint32_t>(n_total + 16);
  cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(ids.size());
  cp.n_threads = cp.n_threads_batch = threads;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }
  std::vector<float> out;  // [n_pos][V]
  llama_batch batch = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = static_cast<int32_t>(ids.size());
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama_decode failed\n");
    return 1;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* l = llama_get_logits_ith(ctx, static_cast<int32_t>(i));
    out.insert(out.end(), l, l + V);
  }
  std::vector<llama_token> gen;
  for (int s = 0; s < greedy; ++s) {
    const float* last = out.data() + out.size() - V;
    llama_token next = 0;
    for (int v = 1; v < V; ++v)
      if (last[v] > last[next]) next = v;
    gen.push_back(next);
    batch.token[0] = next;
    batch.pos[0] = static_cast<llama_pos>(ids.size() + s);
    batch.n_seq_id[0] = 1;
    batch.seq_id[0][0] = 0;
    batch.logits[0] = 1;
    batch.n_tokens = 1;
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llama_decode failed at greedy step %d\n", s);
      return 1;
    }
    const float* l = llama_get_logits_ith(ctx, 0);
    out.insert(out.end(), l, l + V);
  }
  FILE* f = std::fopen(argv[3], "wb");
  if (!f || std::fwrite(out.data(), sizeof(float), out.size(), f) != out.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "%s: cannot write\n", argv[3]);
    return 1;
  }
  std::printf("{\"n_vocab\": %d, \"n_pos\": %zu, \"greedy\": [", V, out.size() / V);
  for (size_t i = 0; i < gen.size(); ++i) std::printf("%s%d", i ? ", " : "", gen[i]);
  std::printf("]}\n");
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
