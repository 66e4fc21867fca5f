// A minimal PNG writer: 8-bit RGB, no interlace, filter None, the image data in a zlib stream of
// our own (no compression library needed): one fixed-Huffman deflate block with run and
// previous-row matches, or stored (uncompressed) blocks. Chunk CRCs (CRC-32) and the zlib
// Adler-32 are computed here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvs::inspect {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height][width][3]
  RgbImage() = default;
  RgbImage(int w, int h, uint8_t fill = 255);
  void set(int x, int y, uint8_t r, uint8_t g, uint8_t b);
  const uint8_t* at(int x, int y) const { return &rgb[(static_cast<size_t>(y) * width + x) * 3]; }
};

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);  // PNG/zlib CRC-32 (reflected 0xEDB88320)
uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler = 1);

// The PNG file's bytes. compress: one fixed-Huffman deflate block with matches at the previous
// pixel and the previous row (a heatmap shrinks ~30x); else stored blocks. Throws kvs::Error for an
// empty or oversized image (> 2^14 on a side).
std::string encode_png(const RgbImage& img, bool compress = true);
// Writes encode_png(img) to `path` atomically; throws kvs::Error naming the path.
void write_png(const std::string& path, const RgbImage& img);

}  // namespace kvs::inspect
