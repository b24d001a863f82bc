#pragma once
// Which output tile and K range one work unit computes (a CTA of a one-unit-per-CTA grid, or one turn of a persistent
// CTA). Units are numbered split-major: unit = split * tiles + tile. Tiles go in N-fastest order, or with RASTER = r
// in bands of 2^r M tiles walked M-fastest, so that concurrent units share weight columns in L2. The K tiles are cut
// into SPLIT near-equal ranges. Shared by every GEMM kernel of the families.
#include "gemm/abi.cuh"

namespace qtune {
namespace device {

struct TileWork {
  int split;             // which K range
  int tile;              // the tile's position in the tile order (its split-K workspace slot and counter)
  int tile_m, tile_n;    // the tile's coordinates in tiles
  int m0, n0;            // its first row and column
  int rows_valid;        // rows of the tile inside M
  int kt_begin, kt_end;  // its K tiles: [kt_begin, kt_end)
};

template <int BM, int BN, int BK, int RASTER, int SPLIT>
struct TileSchedule {
  static_assert(RASTER >= 0 && RASTER <= 5, "RASTER is 0 (N-fastest order) or log2 of the M-band width, at most 5");
  static_assert(SPLIT >= 1, "SPLIT_K must be at least 1");

  int tiles_n, tiles_m, tiles, k_tiles;

  __device__ __forceinline__ explicit TileSchedule(const GemmParams& p)
      : tiles_n(p.n / BN), tiles_m((p.m + BM - 1) / BM), tiles(tiles_n * tiles_m), k_tiles(p.k / BK) {}

  __device__ __forceinline__ int units() const { return tiles * SPLIT; }

  // The tile at position `tile` of the order.
  __device__ __forceinline__ void locate(int tile, int& tile_m, int& tile_n) const {
    if constexpr (RASTER == 0) {
      tile_m = tile / tiles_n;
      tile_n = tile % tiles_n;
    } else {
      constexpr int band = 1 << RASTER;
      const int band_size = band * tiles_n;
      const int first_m = (tile / band_size) * band;
      const int band_rows = min(band, tiles_m - first_m);
      const int in_band = tile % band_size;
      tile_m = first_m + in_band % band_rows;
      tile_n = in_band / band_rows;
    }
  }

  __device__ __forceinline__ TileWork work(const GemmParams& p, int unit) const {
    TileWork w;
    w.split = unit / tiles;
    w.tile = unit % tiles;
    locate(w.tile, w.tile_m, w.tile_n);
    w.m0 = w.tile_m * BM;
    w.n0 = w.tile_n * BN;
    w.rows_valid = min(BM, p.m - w.m0);
    w.kt_begin = static_cast<int>(static_cast<long long>(w.split) * k_tiles / SPLIT);
    w.kt_end = static_cast<int>(static_cast<long long>(w.split + 1) * k_tiles / SPLIT);
    return w;
  }
};

}  // namespace device
}  // namespace qtune
