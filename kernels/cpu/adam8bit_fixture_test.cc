// The 8-bit CPU AdamW against the independent numpy reference of docs/quantization.md's
// "8-bit Adam states" (tools/adam8bit_reference.py, which wrote kernels/cpu/testdata/adam8bit/;
// //tools:adam8bit_reference_test keeps those files equal to what the script writes now):
// three steps over two whole blocks (one all zero) and a tail block, the codes and absmaxes
// exactly and the master bit for bit after every step, from the reference and from every
// SIMD path this CPU has; the bf16 param copy is the master rounded to nearest even.
// Tolerance: none.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/quant_format.h"
#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/fixture_files.h"

namespace strata::cpu {
namespace {

const char* kDir = "kernels/cpu/testdata/adam8bit/";

template <typename T>
std::vector<T> Read(const std::string& name) {
  return ReadFixture<T>(kDir + name);
}

void ExpectSameBytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << what << ", element " << i;
  }
}

struct Case {
  size_t n = 0;
  AdamParams hp;
};

Case ReadCase() {
  std::ifstream in(std::string(kDir) + "hyper.txt");
  EXPECT_TRUE(in.good());
  Case c;
  std::string lr, beta1, beta2, eps, weight_decay, grad_scale;
  in >> c.n >> lr >> beta1 >> beta2 >> eps >> weight_decay >> grad_scale;
  // Hexadecimal floats, exact in fp32.
  c.hp.lr = std::strtof(lr.c_str(), nullptr);
  c.hp.beta1 = std::strtof(beta1.c_str(), nullptr);
  c.hp.beta2 = std::strtof(beta2.c_str(), nullptr);
  c.hp.eps = std::strtof(eps.c_str(), nullptr);
  c.hp.weight_decay = std::strtof(weight_decay.c_str(), nullptr);
  c.hp.grad_scale = std::strtof(grad_scale.c_str(), nullptr);
  return c;
}

TEST(Adam8bitFixture, EveryPathMatchesTheNumpyReference) {
  const Case c = ReadCase();
  ASSERT_EQ(c.n, 2 * kAdamStateBlock + 300);
  EXPECT_EQ(c.hp.beta2, 0.999f);
  for (CpuAdamPath path : {CpuAdamPath::kReference, CpuAdamPath::kAvx2, CpuAdamPath::kAvx512}) {
    if (!CpuAdamPathSupported(path)) {
      std::printf("skipping path %s: not supported by this CPU\n", CpuAdamPathName(path));
      continue;
    }
    SCOPED_TRACE(CpuAdamPathName(path));
    std::vector<float> master = Read<float>("initial.master.f32");
    std::vector<uint8_t> m_codes = Read<uint8_t>("initial.m_codes.u8");
    std::vector<uint8_t> v_codes = Read<uint8_t>("initial.v_codes.u8");
    std::vector<float> m_absmax = Read<float>("initial.m_absmax.f32");
    std::vector<float> v_absmax = Read<float>("initial.v_absmax.f32");
    ASSERT_EQ(master.size(), c.n);
    ASSERT_EQ(m_absmax.size(), Adam8bitBlocks(c.n));
    std::vector<bf16> param(c.n);
    for (int step = 1; step <= 3; ++step) {
      const std::string k = "step" + std::to_string(step) + ".";
      const std::vector<bf16> grad_bf16 = Read<bf16>(k + "grad.bf16");
      ASSERT_EQ(grad_bf16.size(), c.n);
      std::vector<float> grad(c.n);
      for (size_t i = 0; i < c.n; ++i) grad[i] = ToFloat(grad_bf16[i]);
      AdamParams hp = c.hp;
      hp.step = step;
      Adam8bitOptions options;
      options.path = path;
      options.threads = 2;
      ASSERT_TRUE(Adam8bitStep(options, DType::kBF16, param.data(), master.data(), grad.data(),
                               m_codes.data(), m_absmax.data(), v_codes.data(), v_absmax.data(),
                               c.n, hp)
                      .ok());
      ExpectSameBytes(m_codes, Read<uint8_t>(k + "m_codes.u8"), k + "m_codes");
      ExpectSameBytes(v_codes, Read<uint8_t>(k + "v_codes.u8"), k + "v_codes");
      ExpectSameFloats(m_absmax, Read<float>(k + "m_absmax.f32"), k + "m_absmax");
      ExpectSameFloats(v_absmax, Read<float>(k + "v_absmax.f32"), k + "v_absmax");
      ExpectSameFloats(master, Read<float>(k + "master.f32"), k + "master");
      for (size_t i = 0; i < c.n; ++i) ASSERT_EQ(param[i].bits, ToBf16(master[i]).bits) << i;
    }
    EXPECT_EQ(m_absmax[1], 0.0f);  // the zero block
    EXPECT_GT(m_absmax[2], 0.0f);  // the tail block
  }
}

}  // namespace
}  // namespace strata::cpu
