#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <array>
static float f(int32_t b) { return std::bit_cast<float>(b); }
static float exp2i(int k) { return f(k >= -126 ? (k + 127) << 23 : 1 << (k + 149)); }
static float exp2i_inv(int k) { return k >= 128 ? 0.0f : exp2i(-k); }
static float e8m0_old(uint32_t e) { return f(e == 0xFFu ? 0x7FC00000 : (e == 0u ? 0x00400000 : int32_t(e << 23))); }
static float e8m0_new(uint32_t e) { return e == 0xFFu ? f(0x7FC00000) : exp2i(int(e) - 127); }
int main() {
    long bad = 0;
    for (uint32_t e = 0; e < 256; ++e) bad += std::bit_cast<uint32_t>(e8m0_old(e)) != std::bit_cast<uint32_t>(e8m0_new(e));
    for (int k = -149; k <= 128; ++k) bad += std::bit_cast<uint32_t>(exp2i(k)) != std::bit_cast<uint32_t>(std::ldexp(1.0f, k));
    std::mt19937 rng(1);
    long n = 0;
    for (int k = -127; k <= 128; ++k)
        for (int i = 0; i < 200000; ++i) {
            float x = std::bit_cast<float>(uint32_t(rng()));
            if (i < 8) x = std::array<float,8>{0.f,-0.f,INFINITY,-INFINITY,NAN,1e-45f,-3.4e38f,1.f}[i];
            const float a = x / exp2i(k), b = x * exp2i_inv(k);
            ++n;
            if (std::isnan(a) && std::isnan(b)) continue;
            bad += std::bit_cast<uint32_t>(a) != std::bit_cast<uint32_t>(b);
        }
    std::printf("checked %ld divisions; mismatches %ld\n", n, bad);
    return bad != 0;
}
