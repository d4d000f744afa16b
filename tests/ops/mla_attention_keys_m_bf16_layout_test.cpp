// The bf16 keys-as-M kernel's index maps (src/ops/cuda/mla_attention_keys_m_bf16_layout.h; the
// kernel: mla_attention_keys_m_bf16.cu) through the host emulation of one 64-key tile's products
// (tests/testing/keys_m_bf16_emulation.h: ldmatrix / stmatrix.trans and wgmma as the PTX ISA
// states them): 32 query rows per CTA, QK at N = 16 a warpgroup, P^T by one stmatrix.x4.trans a
// warp, PV at N = 32; the tile as per-row copies land it, key rows 1,168 bytes apart.
#include <gtest/gtest.h>

#include <cstdint>

#include "../../src/ops/cuda/mla_attention_keys_m_bf16_layout.h"
#include "testing/keys_m_bf16_emulation.h"

namespace {

namespace kmb = kestrel::ops::cuda::keys_m_bf16;
namespace sm = kestrel::ops::cuda::sm90;
using kestrel::testing_util::keys_m_bf16_emulation::emulate;
using kestrel::testing_util::keys_m_bf16_emulation::KernelSide;
using kestrel::testing_util::sm90_hw::LayoutResult;

// The kernel's side with key rows `pitch` bytes apart in the stage.
KernelSide kernel_side(int pitch = kmb::kRowBytes) {
  KernelSide k;
  k.rows = kmb::kRows;
  k.wg_rows = kmb::kWgRows;
  k.pt_calls = 1;
  k.tile_offset = [pitch](int key, int byte) { return static_cast<uint32_t>(key * pitch + byte); };
  k.qk_addr = [pitch](const KernelSide& s, int w, int ks, int lane) {
    return static_cast<uint32_t>(s.qk_key(w, lane) * pitch + s.qk_byte(ks, lane));
  };
  k.pv_addr = [pitch](const KernelSide& s, int c, int mm, int w, int ks, int lane) {
    return static_cast<uint32_t>(s.pv_key(ks, lane) * pitch + 2 * s.pv_feature(c, mm, w, lane));
  };
  k.qk_key = kmb::qk_key;
  k.qk_byte = kmb::qk_byte;
  k.pv_key = kmb::pv_key;
  k.pv_feature = kmb::pv_feature;
  k.o_feature = kmb::o_feature;
  k.pt_row = [](int c, int, int lane) { return kmb::pt_row(c, lane); };
  k.pt_key = kmb::pt_key;
  k.sw128 = kmb::sw128;
  k.q_step_lo = sm::k_step_lo;  // Q in chunks of 32 rows
  return k;
}

TEST(MlaAttentionKeysMBf16Layout, ProductsMatchTheHardwareModel) {
  for (uint64_t seed : {1u, 2u}) {
    const LayoutResult r = emulate(kernel_side(), seed);
    EXPECT_EQ(r.error, "") << "seed " << seed;
    EXPECT_EQ(r.worst_wavefronts, 1) << "every ldmatrix / stmatrix matrix in one wavefront";
  }
}

TEST(MlaAttentionKeysMBf16Layout, DenseRowsConflict) {
  const LayoutResult r = emulate(kernel_side(kmb::kCacheRowBytes), 3);  // 1,152: every row at one address mod 128
  EXPECT_EQ(r.error, "") << "the products do not depend on the row pitch";
  EXPECT_EQ(r.worst_wavefronts, 8) << "8 rows of a matrix in one bank group";
}

TEST(MlaAttentionKeysMBf16Layout, PlantedBugsAreCaught) {
  const auto caught = [](const KernelSide& ks, const char* what) { EXPECT_NE(emulate(ks, 4).error, "") << what; };
  KernelSide k = kernel_side();
  k.qk_key = [](int w, int lane) { return 16 * w + lane % 8 + 8 * (lane / 16); };  // halves swapped with bytes
  caught(k, "QK keys");
  k = kernel_side();
  k.qk_byte = [](int s, int lane) { return 32 * s + 16 * ((lane / 8) % 2); };
  caught(k, "QK bytes");
  k = kernel_side();
  k.pv_key = [](int s, int lane) { return 16 * s + lane % 8 + 8 * ((lane / 8) % 2); };
  caught(k, "PV keys");
  k = kernel_side();
  k.pv_feature = [](int c, int mm, int w, int lane) { return 256 * c + 64 * mm + 16 * w + 8 * (lane / 16); };
  caught(k, "PV features");
  k = kernel_side();
  k.o_feature = [](int c, int mm, int t, int i) { return 256 * c + 64 * mm + 16 * (t / 32) + (t % 32) / 4 + 8 * (i % 2); };
  caught(k, "o features");
  k = kernel_side();
  k.pt_row = [](int c, int, int lane) { return 16 * c + 8 * ((lane / 8) % 2) + lane % 8; };
  caught(k, "P^T rows");
  k = kernel_side();
  k.pt_key = [](int w, int lane) { return 16 * w + 8 * ((lane / 8) / 2); };
  caught(k, "P^T keys");
  k = kernel_side();
  k.sw128 = [](int n, int col) { return static_cast<uint32_t>((col / 64) * 32 * 128 + n * 128 + (col % 64) * 2); };
  caught(k, "Q and P^T without the swizzle");
}

}  // namespace
