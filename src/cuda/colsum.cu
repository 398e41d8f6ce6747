// colsum.cu — the per-device scratch of the deterministic column sums (cuda/colsum.cuh) and
// their second pass over partials laid out as dw itself (the fused RMSNorm and gated RMSNorm
// backwards, the tiled conv1d backward).
#include "colsum.cuh"

// Scratch of the device in use (cuda/colsum.cuh): grown (never shrunk) when a call needs
// more, which happens on the first calls only. Stream order makes it safe for launchers issued
// on one stream per device (the backend's compute stream); growth synchronises the device
// before freeing.
float *colsum_scratch(size_t nfloats) {
    static float *buf[COLSUM_MAX_DEVICES];
    static size_t cap[COLSUM_MAX_DEVICES];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= COLSUM_MAX_DEVICES) gdn_die("colsum: device %d >= %d", dev, COLSUM_MAX_DEVICES);
    if (nfloats > cap[dev]) {
        if (buf[dev]) {
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaFree(buf[dev]));
        }
        const size_t want = GDN_MAX(nfloats, COLSUM_SCRATCH);
        CUDA_CHECK(cudaMalloc((void **)&buf[dev], want * sizeof(float)));
        cap[dev] = want;
    }
    return buf[dev];
}

namespace {

// colsum_final_kernel's destination when the partials are laid out as dw itself: dw[c]
struct dw_dst {
    float *dw;
    __device__ __forceinline__ float *dst(int c) const { return dw + c; }
};

}  // namespace

void colsum_final_dw(float *dw, const float *part, int cols, int S, cudaStream_t s) {
    colsum_final_kernel<dw_dst>
        <<<(unsigned)GDN_CDIV((size_t)cols * 32, (size_t)256), 256, 0, s>>>(dw_dst{dw}, part, cols, S);
    CUDA_CHECK_LAUNCH();
}
