// The planned wide bf16 keys-as-M kernel's index maps and shared-memory budget
// (src/ops/cuda/mla_attention_keys_m_bf16_wide_layout.h; no kernel uses them yet) through the host
// emulation of one 64-key tile's products (tests/testing/keys_m_bf16_emulation.h): 64 query rows
// per CTA, QK at N = 32 a warpgroup with Q in 64-row chunks, P^T by two stmatrix.x4.trans a warp,
// PV at N = 64; the tile as tensor copies land it with the 128-byte swizzle (tile_offset), read at
// the kernel's addresses (qk_unit, pv_unit).
#include <gtest/gtest.h>

#include <cstdint>

#include "../../src/ops/cuda/mla_attention_keys_m_bf16_wide_layout.h"
#include "testing/keys_m_bf16_emulation.h"

namespace {

namespace kw = kestrel::ops::cuda::keys_m_bf16_wide;
namespace sm = kestrel::ops::cuda::sm90;
using kestrel::testing_util::keys_m_bf16_emulation::emulate;
using kestrel::testing_util::keys_m_bf16_emulation::KernelSide;
using kestrel::testing_util::sm90_hw::LayoutResult;

KernelSide kernel_side() {
  KernelSide k;
  k.rows = kw::kRows;
  k.wg_rows = kw::kWgRows;
  k.pt_calls = 2;
  k.tile_offset = kw::tile_offset;
  k.qk_addr = [](const KernelSide& s, int w, int ks, int lane) {
    return static_cast<uint32_t>(s.qk_key(w, lane) * 128) + kw::qk_unit(ks % 4, lane) + static_cast<uint32_t>((ks / 4) * kw::kChunkBytes);
  };
  k.pv_addr = [](const KernelSide& s, int c, int mm, int w, int ks, int lane) {
    return static_cast<uint32_t>((4 * c + mm) * kw::kChunkBytes + s.pv_key(0, lane) * 128 + ks * 16 * 128) + kw::pv_unit(w, lane);
  };
  k.qk_key = kw::qk_key;
  k.qk_byte = kw::qk_byte;
  k.pv_key = kw::pv_key;
  k.pv_feature = kw::pv_feature;
  k.o_feature = kw::o_feature;
  k.pt_row = kw::pt_row;
  k.pt_key = kw::pt_key;
  k.sw128 = kw::sw128;
  k.q_step_lo = sm::q_step_lo;  // Q in chunks of 64 rows
  return k;
}

TEST(MlaAttentionKeysMBf16WideLayout, ProductsMatchTheHardwareModel) {
  for (uint64_t seed : {1u, 2u}) {
    const LayoutResult r = emulate(kernel_side(), seed);
    EXPECT_EQ(r.error, "") << "seed " << seed;
    EXPECT_EQ(r.worst_wavefronts, 1) << "every ldmatrix / stmatrix matrix in one wavefront";
  }
}

TEST(MlaAttentionKeysMBf16WideLayout, TheBudgetFitsWithoutSlack) {
  EXPECT_EQ(kw::kOffStages, 73728);
  EXPECT_EQ(kw::kOffPt, 73728 + 2 * 73728);
  EXPECT_LE(kw::kSmemBytes, kw::kSmemMax);
  EXPECT_GT(kw::kSmemBytes + 1024, kw::kSmemMax) << "the 1,024-byte alignment slack of today's kernels would not fit";
}

// Without the swizzle (the copies' layout and the kernel's units unswizzled alike) the products
// hold, and every ldmatrix matrix of the tile is 8 wavefronts: dense 1,152-byte rows need it.
TEST(MlaAttentionKeysMBf16WideLayout, UnswizzledTileConflicts) {
  KernelSide plain = kernel_side();
  plain.tile_offset = [](int key, int byte) { return static_cast<uint32_t>((byte / 128) * kw::kChunkBytes + key * 128 + byte % 128); };
  plain.qk_addr = [](const KernelSide& s, int w, int ks, int lane) {
    return static_cast<uint32_t>(s.qk_key(w, lane) * 128 + (ks / 4) * kw::kChunkBytes + s.qk_byte(ks, lane) % 128);
  };
  plain.pv_addr = [](const KernelSide& s, int c, int mm, int w, int ks, int lane) {
    return static_cast<uint32_t>((4 * c + mm) * kw::kChunkBytes + s.pv_key(ks, lane) * 128 + (2 * s.pv_feature(c, mm, w, lane)) % 128);
  };
  const LayoutResult r = emulate(plain, 3);
  EXPECT_EQ(r.error, "") << "the products do not depend on the swizzle";
  EXPECT_EQ(r.worst_wavefronts, 8) << "8 rows of a matrix in one bank group";
}

TEST(MlaAttentionKeysMBf16WideLayout, PlantedBugsAreCaught) {
  const auto caught = [](const KernelSide& ks, const char* what) { EXPECT_NE(emulate(ks, 4).error, "") << what; };
  KernelSide k = kernel_side();
  k.qk_addr = [](const KernelSide& s, int w, int ks, int lane) {  // the unit's halves from the wrong lanes
    return static_cast<uint32_t>(s.qk_key(w, lane) * 128 + (((2 * (ks % 4) + (lane / 8) % 2) ^ (lane % 8)) * 16) + (ks / 4) * kw::kChunkBytes);
  };
  caught(k, "QK units");
  k = kernel_side();
  k.pv_addr = [](const KernelSide& s, int c, int mm, int w, int ks, int lane) {
    return static_cast<uint32_t>((4 * c + mm) * kw::kChunkBytes + s.pv_key(0, lane) * 128 + ks * 16 * 128 + (((2 * w + lane / 16) ^ (lane % 8)) * 16));
  };
  caught(k, "PV units");
  k = kernel_side();
  k.q_step_lo = sm::k_step_lo;  // 32-row chunks: the 32-row kernel's Q stride
  caught(k, "Q's k-steps with the 32-row chunk stride");
  k = kernel_side();
  k.pt_row = [](int c, int h, int lane) { return 32 * c + 8 * (h + 2 * ((lane / 8) / 2)) + lane % 8; };
  caught(k, "P^T rows: the two stores' row groups interleaved");
  k = kernel_side();
  k.pt_row = [](int c, int h, int lane) { return 16 * c + 8 * (2 * h + (lane / 8) / 2) + lane % 8; };
  caught(k, "P^T rows: the 32-row kernel's warpgroup offset");
  k = kernel_side();
  k.sw128 = [](int n, int col) {
    return static_cast<uint32_t>((col / 64) * 32 * 128 + n * 128 + ((((col % 64) / 8) ^ (n % 8)) * 16) + (col % 8) * 2);
  };
  caught(k, "Q and P^T with the 32-row chunk stride");
  k = kernel_side();
  k.o_feature = [](int c, int mm, int t, int i) { return 256 * c + 64 * mm + 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 4) % 2); };
  caught(k, "o features from the column bit");
}

}  // namespace
