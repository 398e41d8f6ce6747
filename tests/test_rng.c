// test_rng.c — Philox4x32-10 against the Random123 known-answer vector, stream independence,
// and the moments of the uniform and normal draws.
#include "testutil.h"

int main(void) {
    uint32_t o[4];
    philox4x32(0, 0, o);
    const uint32_t kat[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
    int ok = memcmp(o, kat, sizeof kat) == 0;
    printf("philox4x32-10 known answer (ctr 0, key 0): %08x %08x %08x %08x  %s\n", o[0], o[1],
           o[2], o[3], ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;

    rng_t a, b;
    rng_init(&a, 42, 0);
    rng_init(&b, 42, 1);
    int same = 0;
    for (int i = 0; i < 1000; i++) same += rng_u32(&a) == rng_u32(&b);
    printf("streams 0 and 1 of seed 42 share %d of 1000 draws  %s\n", same, same < 3 ? "pass" : "FAIL");
    gc_checks++;
    if (same >= 3) gc_failures++;

    rng_init(&a, 7, 3);
    double s = 0, s2 = 0, n1 = 0, n2 = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double u = rng_uniform(&a), z = rng_normal(&a);
        s += u; s2 += u * u; n1 += z; n2 += z * z;
    }
    double mu = s / n, var = s2 / n - mu * mu, zm = n1 / n, zv = n2 / n - zm * zm;
    int mom = fabs(mu - 0.5) < 0.005 && fabs(var - 1.0 / 12) < 0.002 && fabs(zm) < 0.01 && fabs(zv - 1) < 0.02;
    printf("moments: uniform mean %.4f var %.4f, normal mean %.4f var %.4f  %s\n", mu, var, zm, zv, mom ? "pass" : "FAIL");
    gc_checks++;
    if (!mom) gc_failures++;

    // reproducibility: the same (seed, stream) gives the same sequence
    rng_init(&a, 99, 5); rng_init(&b, 99, 5);
    int rep = 1;
    for (int i = 0; i < 100; i++) rep &= rng_u64(&a) == rng_u64(&b);
    printf("same seed and stream reproduce  %s\n", rep ? "pass" : "FAIL");
    gc_checks++;
    if (!rep) gc_failures++;

    // rng_seek(n) continues exactly where n drawn words would leave the stream, at every
    // offset within a Philox block
    uint32_t ref[64];
    rng_init(&a, 123, 9);
    for (int i = 0; i < 64; i++) ref[i] = rng_u32(&a);
    int seek = 1;
    for (int n0 = 0; n0 < 48; n0++) {
        rng_init(&b, 123, 9);
        rng_u32(&b);  // a stale buffer that the seek must drop
        rng_seek(&b, (uint64_t)n0);
        for (int i = n0; i < 64; i++) seek &= rng_u32(&b) == ref[i];
    }
    printf("rng_seek(n) == n draws, n = 0..47  %s\n", seek ? "pass" : "FAIL");
    gc_checks++;
    if (!seek) gc_failures++;

    // rng_tell counts the words drawn, through every kind of draw, and rng_seek(rng_tell) is
    // a no-op on what follows
    rng_init(&a, 5, 1);
    int tell = rng_tell(&a) == 0;
    uint64_t words = 0;
    for (int i = 0; i < 30; i++) {
        switch (i % 3) {
        case 0: rng_u32(&a); words += 1; break;
        case 1: rng_uniform(&a); words += 2; break;
        default: rng_normal(&a); words += 4; break;
        }
        tell &= rng_tell(&a) == words;
        b = a;
        rng_seek(&b, rng_tell(&a));
        rng_t c = a;
        tell &= rng_u32(&b) == rng_u32(&c);
    }
    printf("rng_tell == words drawn; rng_seek(rng_tell) continues the stream  %s\n",
           tell ? "pass" : "FAIL");
    gc_checks++;
    if (!tell) gc_failures++;
    return gc_finish("test_rng");
}
