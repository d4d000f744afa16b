// The peer for mla_attention's bf16 rows: FlashMLA's sm90 dense decode (deepseek-ai/FlashMLA, its
// public source; the issue's goals are its times) timed on this GPU beside our kernels, on the
// shapes of our bench rows (bench/mla_attention.cpp, bf16 cache, page 64, P rounded once as
// FlashMLA computes it). Our harness, not FlashMLA's code: it calls FlashMLA's three launchers
// (scheduler metadata, the split-KV kernel, the combine) as FlashMLA's own dense_decode API does,
// with the metadata computed once outside the timing (as FlashMLA's benchmark passes it).
//
// Built by scripts/build-peer-flashmla from git-ignored copies (.peers/FlashMLA, .peers/cutlass at
// FlashMLA's pinned CUTLASS commit) into .peers/flashmla-bench, a static binary to carry to the GPU
// machine. Each shape: random bf16 cache (pages in a random order; one per batch and context,
// shared by the shapes that follow with the same two), q, seq_lens = ctx, checked against a
// double-precision reference on a few rows, then timed (CUDA events, median and min of --reps
// launches of split-KV + combine after 3 warm-ups).
//
//   .peers/flashmla-bench [--reps N] [--grid] [--filter SUBSTR ...]
//
// --grid: the issue's whole bf16 grid (H 32 / 96 / 128, q_len 1 / 2 / 4 / 8, B 1 / 8 / 32 / 128,
// context 1k / 8k / 32k), the same cases as kestrel-bench's `mla_attention/...-bf16-fastP`
// (scripts/flashmla-compare puts the two side by side); without it, the issue's FlashMLA shapes
// and a few more.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "params.h"
#include "sm90/decode/dense/splitkv_mla.h"

// A measurement build of the peer (FlashMLA's kernel patched with clock64 records, a git-ignored
// copy that is never committed) defines this: it writes the copy timeline of the last launch in
// the format tools/s64_copytime.py reads (docs/ops/mla_attention.md, the open list). The normal
// build leaves it null.
extern "C" __attribute__((weak)) void flashmla_ct_dump(const char* path);
#include "smxx/decode/combine/combine.h"
#include "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.h"

namespace {

#define PEER_CUDA(x)                                                                                  \
  do {                                                                                                \
    const cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "flashmla-bench: %s failed: %s\n", #x, cudaGetErrorString(e_));            \
      std::exit(2);                                                                                   \
    }                                                                                                 \
  } while (0)

constexpr int kDqk = 576, kDv = 512, kPage = 64;

struct Shape {
  int B, s_q, H, ctx;
  std::string name() const {
    return std::string("flashmla/") + (s_q == 1 ? "decode" : "verify" + std::to_string(s_q)) + "-B" + std::to_string(B) +
           "-ctx" + std::to_string(ctx) + "-H" + std::to_string(H) + "-bf16-fastP";
  }
};

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
T* device_copy(const std::vector<T>& h) {
  T* d = nullptr;
  PEER_CUDA(cudaMalloc(&d, h.size() * sizeof(T)));
  PEER_CUDA(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Values in [-1, 1) from a xorshift stream (a B128 32k cache is 2.4 G values: a distribution
// object per value would take most of a device call).
struct Uniform {
  uint64_t state;
  explicit Uniform(uint64_t seed) : state(seed * 0x9e3779b97f4a7c15ull + 1) {}
  float operator()() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<float>(static_cast<int32_t>(state >> 32)) * (1.0f / 2147483648.0f);
  }
};

// The paged cache of B sequences of ctx keys: [num_pages][64][576] bf16 (page 0 unused), the
// sequences' pages in a random order; host copies for the reference check, device copies for the
// kernel.
struct Pool {
  int B = 0, ctx = 0, pages_per_seq = 0, num_pages = 0;
  std::vector<uint16_t> cache;
  std::vector<int> table;
  uint16_t* d_cache = nullptr;
  int *d_table = nullptr, *d_lens = nullptr;

  Pool(int B_, int ctx_, uint64_t seed) : B(B_), ctx(ctx_) {
    pages_per_seq = (ctx + kPage - 1) / kPage;
    num_pages = B * pages_per_seq + 1;
    Uniform uni(seed);
    cache.resize(static_cast<size_t>(num_pages) * kPage * kDqk);
    for (auto& x : cache) x = to_bf16(uni());
    table.resize(static_cast<size_t>(num_pages - 1));
    std::iota(table.begin(), table.end(), 1);
    std::mt19937_64 rng(seed);
    std::shuffle(table.begin(), table.end(), rng);
    d_cache = device_copy(cache);
    d_table = device_copy(table);
    d_lens = device_copy(std::vector<int>(B, ctx));
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() {
    cudaFree(d_cache);
    cudaFree(d_table);
    cudaFree(d_lens);
  }
};

// Runs one shape on a pool of its batch and context; returns false when the check failed.
bool run(const Shape& sh, const Pool& pool, int reps, int num_sms, uint64_t seed) {
  const int B = sh.B, s_q = sh.s_q, H = sh.H, ctx = sh.ctx;
  const int q_seq = s_q * H;  // rows per sequence (one KV head)
  const int pages_per_seq = pool.pages_per_seq, num_pages = pool.num_pages;
  const std::vector<uint16_t>& cache = pool.cache;
  const std::vector<int>& table = pool.table;
  Uniform uni(seed);
  // q [B][s_q][H][576] = [B][q_seq][576].
  std::vector<uint16_t> q(static_cast<size_t>(B) * q_seq * kDqk);
  for (auto& x : q) x = to_bf16(uni());

  const int parts = std::max(num_sms / ((q_seq + 63) / 64), 1);  // FlashMLA's num_sm_parts (one KV head)
  const int total_splits = B + parts;
  uint16_t *d_q = device_copy(q), *d_o = nullptr;
  int *d_splits = nullptr;
  int* const d_lens = pool.d_lens;
  float *d_lse = nullptr, *d_lse_acc = nullptr, *d_o_acc = nullptr;
  DecodingSchedMeta* d_meta = nullptr;
  PEER_CUDA(cudaMalloc(&d_o, static_cast<size_t>(B) * q_seq * kDv * 2));
  PEER_CUDA(cudaMalloc(&d_lse, static_cast<size_t>(B) * q_seq * 4));
  PEER_CUDA(cudaMalloc(&d_lse_acc, static_cast<size_t>(total_splits) * q_seq * 4));
  PEER_CUDA(cudaMalloc(&d_o_acc, static_cast<size_t>(total_splits) * q_seq * kDv * 4));
  PEER_CUDA(cudaMalloc(&d_meta, static_cast<size_t>(parts) * sizeof(DecodingSchedMeta)));
  PEER_CUDA(cudaMalloc(&d_splits, static_cast<size_t>(B + 1) * 4));
  cudaStream_t stream;
  PEER_CUDA(cudaStreamCreate(&stream));

  const float scale = 1.0f / std::sqrt(static_cast<float>(kDqk));
  GetDecodeSchedMetaParams mp = {B, s_q, 64, 5, -1, -1, nullptr, nullptr, d_lens, d_meta, d_splits, parts, stream};
  smxx::decode::run_get_decoding_sched_meta_kernel(mp);

  DenseAttnDecodeParams p{};
  p.b = B;
  p.s_q = s_q;
  p.q_seq_per_hk = q_seq;
  p.seqlens_k_ptr = d_lens;
  p.h_q = H;
  p.h_k = 1;
  p.num_blocks = num_pages;
  p.q_head_per_hk = H;
  p.is_causal = s_q > 1;
  p.d = kDqk;
  p.d_v = kDv;
  p.scale_softmax = scale;
  p.scale_softmax_log2 = static_cast<float>(scale * M_LOG2E);
  p.q_ptr = d_q;
  p.k_ptr = pool.d_cache;
  p.o_ptr = d_o;
  p.softmax_lse_ptr = d_lse;
  // Strides in elements, as FlashMLA's API sets them for q [B][q_seq][1][576], cache
  // [pages][64][1][576], out [B][1][q_seq][512].
  p.q_batch_stride = static_cast<int64_t>(q_seq) * kDqk;
  p.q_row_stride = kDqk;
  p.q_head_stride = kDqk;
  p.k_batch_stride = static_cast<int64_t>(kPage) * kDqk;
  p.k_row_stride = kDqk;
  p.k_head_stride = kDqk;
  p.o_batch_stride = static_cast<int64_t>(q_seq) * kDv;
  p.o_row_stride = kDv;
  p.o_head_stride = static_cast<int64_t>(q_seq) * kDv;
  p.block_table = pool.d_table;
  p.block_table_batch_stride = pages_per_seq;
  p.page_block_size = kPage;
  p.tile_scheduler_metadata_ptr = d_meta;
  p.num_sm_parts = parts;
  p.num_splits_ptr = d_splits;
  p.total_num_splits = total_splits;
  p.softmax_lseaccum_ptr = d_lse_acc;
  p.oaccum_ptr = d_o_acc;
  p.stream = stream;
  CombineParams cp = {B, s_q, H, kDv, d_lse, d_o, q_seq, H, q_seq * kDv, H * kDv, kDv, d_lse_acc, d_o_acc, q_seq, H,
                      q_seq * kDv, H * kDv, kDv, d_meta, d_splits, parts, nullptr, stream};
  const auto launch = [&] {
    sm90::run_flash_splitkv_mla_kernel<cutlass::bfloat16_t>(p);
    smxx::decode::run_flash_mla_combine_kernel<cutlass::bfloat16_t>(cp);
  };

  // Check a few rows (first and last sequence, first and last row) against double precision.
  launch();
  PEER_CUDA(cudaStreamSynchronize(stream));
  PEER_CUDA(cudaGetLastError());
  std::vector<uint16_t> o(static_cast<size_t>(B) * q_seq * kDv);
  PEER_CUDA(cudaMemcpy(o.data(), d_o, o.size() * 2, cudaMemcpyDeviceToHost));
  double worst = 0.0, scale_ref = 0.0;  // largest error, largest |reference|
  const auto kv_row = [&](int b, int j) {  // the cache row of sequence b's key j
    return &cache[(static_cast<size_t>(table[b * pages_per_seq + j / kPage]) * kPage + j % kPage) * kDqk];
  };
  for (const int b : {0, B - 1})
    for (const int r : {0, q_seq - 1}) {
      const int qi = r / H, attend = ctx - s_q + qi + 1;  // bottom-right causal
      std::vector<double> s(attend);
      double m = -1e300;
      for (int j = 0; j < attend; ++j) {
        const uint16_t* k = kv_row(b, j);
        const uint16_t* qr = &q[(static_cast<size_t>(b) * q_seq + r) * kDqk];
        double acc = 0.0;
        for (int d = 0; d < kDqk; ++d) acc += static_cast<double>(from_bf16(qr[d])) * from_bf16(k[d]);
        s[j] = acc * scale;
        m = std::max(m, s[j]);
      }
      double l = 0.0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (int d = 0; d < kDv; d += 37) {
        double want = 0.0;
        for (int j = 0; j < attend; ++j)
          want += s[j] * from_bf16(kv_row(b, j)[d]);
        want /= l;
        worst = std::max(worst, std::fabs(want - from_bf16(o[(static_cast<size_t>(b) * q_seq + r) * kDv + d])));
        scale_ref = std::max(scale_ref, std::fabs(want));
      }
    }
  // P rounded once and o rounded to bf16 leave errors far below 5% of the outputs' size; a wrong
  // layout gives errors of their size. (The weights are near flat, so a mask off by a key would not
  // show: this checks the harness's layouts, not FlashMLA.)
  const bool ok = worst <= 0.05 * scale_ref + 1e-5;

  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> us;
  cudaEvent_t e0, e1;
  PEER_CUDA(cudaEventCreate(&e0));
  PEER_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < reps; ++i) {
    PEER_CUDA(cudaEventRecord(e0, stream));
    launch();
    PEER_CUDA(cudaEventRecord(e1, stream));
    PEER_CUDA(cudaEventSynchronize(e1));
    float ms = 0.0f;
    PEER_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    us.push_back(ms * 1000.0f);
  }
  PEER_CUDA(cudaGetLastError());
  std::sort(us.begin(), us.end());
  const double bytes = static_cast<double>(B) * ctx * kDqk * 2;
  std::printf("%-52s %10.2f %10.2f  cache %.3f GB  %s (max |err| %.2e, max |o| %.2e over checked rows)\n", sh.name().c_str(),
              us[us.size() / 2], us.front(), bytes / 1e9, ok ? "check ok" : "CHECK FAILED", worst, scale_ref);
  std::fflush(stdout);
  if (const char* dir = std::getenv("KESTREL_TIMELINE_DIR"); dir && flashmla_ct_dump) {
    std::string n = sh.name();
    std::replace(n.begin(), n.end(), '/', '_');
    flashmla_ct_dump((std::string(dir) + "/" + n + ".txt").c_str());
  }

  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
  for (void* ptr : {static_cast<void*>(d_q), static_cast<void*>(d_o), static_cast<void*>(d_splits), static_cast<void*>(d_lse),
                    static_cast<void*>(d_lse_acc), static_cast<void*>(d_o_acc), static_cast<void*>(d_meta)})
    cudaFree(ptr);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  bool grid = false;
  std::vector<std::string> filters;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--filter" && i + 1 < argc) {
      filters.emplace_back(argv[++i]);
    } else if (a == "--grid") {
      grid = true;
    } else {
      std::fprintf(stderr, "usage: flashmla-bench [--reps N] [--grid] [--filter SUBSTR ...]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  PEER_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("flashmla-bench  %s, %d SMs; median and min us of split-KV + combine\n", prop.name, prop.multiProcessorCount);
  // The issue's FlashMLA shapes, then the other rows of bench/mla_attention.cpp's bf16 grid; or
  // the whole grid, in the order of its caches (batch and context outermost).
  std::vector<Shape> shapes = {
      {128, 1, 32, 8192}, {128, 1, 32, 32768}, {32, 1, 32, 32768}, {128, 1, 128, 8192}, {128, 4, 32, 8192},
      {1, 1, 32, 1024},   {1, 1, 32, 32768},   {128, 1, 96, 8192}, {128, 2, 32, 8192},  {128, 8, 32, 8192},
      {8, 1, 32, 8192},   {32, 1, 32, 8192},   {128, 1, 32, 1024}, {32, 1, 128, 8192},  {32, 4, 32, 8192},
      {128, 1, 128, 4096}, {128, 1, 128, 16384}};
  if (grid) {
    shapes.clear();
    for (const int B : {1, 8, 32, 128})
      for (const int ctx : {1024, 8192, 32768})
        for (const int H : {32, 96, 128})
          for (const int s_q : {1, 2, 4, 8}) shapes.push_back({B, s_q, H, ctx});
  }
  bool all_ok = true;
  uint64_t seed = 1;
  std::unique_ptr<Pool> pool;  // the last shape's, kept while the batch and context stay the same
  for (const Shape& s : shapes) {
    const std::string n = s.name();
    if (!filters.empty() && std::none_of(filters.begin(), filters.end(), [&](const std::string& f) { return n.find(f) != std::string::npos; }))
      continue;
    if (!pool || pool->B != s.B || pool->ctx != s.ctx) {
      pool.reset();  // freed before the next is allocated
      pool = std::make_unique<Pool>(s.B, s.ctx, seed++);
    }
    all_ok &= run(s, *pool, reps, prop.multiProcessorCount, seed++);
  }
  return all_ok ? 0 : 1;
}
