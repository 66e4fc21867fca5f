// The inspect heatmap's PNG writer, decoded back by hand: signature, IHDR (size, 8-bit RGB),
// every chunk's CRC-32, the zlib header, the stored deflate blocks (LEN / NLEN), Adler-32, and the
// pixels (filter byte 0 per row).
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "cli_process.h"
#include "eval/inspect/heatmap.h"
#include "eval/inspect/png.h"
#include "runtime/test_util.h"

namespace kvs::inspect {
namespace {

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) | (uint32_t(uint8_t(s[at + 2])) << 8) |
         uint32_t(uint8_t(s[at + 3]));
}

struct Decoded {
  int width = 0, height = 0, depth = 0, colour = 0;
  std::vector<std::string> chunk_types;
  std::string raw;  // inflated scanlines
};

Decoded decode(const std::string& png) {
  Decoded d;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  for (size_t at = 8; at < png.size();) {
    const uint32_t n = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    const std::string body = png.substr(at + 8, n);
    const uint32_t crc = be32(png, at + 8 + n);
    EXPECT_EQ(crc, crc32(reinterpret_cast<const uint8_t*>(png.data() + at + 4), n + 4)) << "chunk " << type;
    d.chunk_types.push_back(type);
    if (type == "IHDR") {
      d.width = static_cast<int>(be32(body, 0));
      d.height = static_cast<int>(be32(body, 4));
      d.depth = uint8_t(body[8]);
      d.colour = uint8_t(body[9]);
    } else if (type == "IDAT") {
      idat += body;
    }
    at += 12 + n;
  }
  // zlib: CMF/FLG with (CMF * 256 + FLG) % 31 == 0, stored blocks, Adler-32 of the data.
  EXPECT_EQ(uint8_t(idat[0]) & 0x0F, 8);
  EXPECT_EQ((uint8_t(idat[0]) * 256 + uint8_t(idat[1])) % 31, 0);
  size_t at = 2;
  for (;;) {
    const uint8_t hdr = uint8_t(idat[at]);
    EXPECT_EQ((hdr >> 1) & 3, 0) << "not a stored block";
    const uint16_t len = uint16_t(uint8_t(idat[at + 1]) | (uint8_t(idat[at + 2]) << 8));
    const uint16_t nlen = uint16_t(uint8_t(idat[at + 3]) | (uint8_t(idat[at + 4]) << 8));
    EXPECT_EQ(uint16_t(~len), nlen);
    d.raw += idat.substr(at + 5, len);
    at += 5 + len;
    if (hdr & 1) break;
  }
  EXPECT_EQ(be32(idat, at), adler32(reinterpret_cast<const uint8_t*>(d.raw.data()), d.raw.size()));
  EXPECT_EQ(at + 4, idat.size());
  return d;
}

TEST(InspectPng, KnownChecksums) {
  const char* s = "123456789";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(s), 9), 0xCBF43926u);  // the CRC-32 check value
  EXPECT_EQ(adler32(reinterpret_cast<const uint8_t*>("Wikipedia"), 9), 0x11E60398u);
  const char* iend = "IEND";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(iend), 4), 0xAE426082u);  // every PNG ends with it
}

TEST(InspectPng, SmallImageRoundTrips) {
  RgbImage img(3, 2);
  img.set(0, 0, 255, 0, 0);
  img.set(2, 1, 1, 2, 3);
  const Decoded d = decode(encode_png(img, /*compress=*/false));
  EXPECT_EQ(d.width, 3);
  EXPECT_EQ(d.height, 2);
  EXPECT_EQ(d.depth, 8);
  EXPECT_EQ(d.colour, 2);
  EXPECT_EQ(d.chunk_types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  ASSERT_EQ(d.raw.size(), 2u * (1 + 9));
  EXPECT_EQ(d.raw[0], 0);  // filter None
  EXPECT_EQ(uint8_t(d.raw[1]), 255);
  EXPECT_EQ(uint8_t(d.raw[2]), 0);
  EXPECT_EQ(uint8_t(d.raw[4]), 255);  // untouched pixels are white
  EXPECT_EQ(uint8_t(d.raw[10 + 1 + 6]), 1);
  EXPECT_EQ(uint8_t(d.raw[10 + 1 + 8]), 3);
}

TEST(InspectPng, LargeImageSpansSeveralStoredBlocks) {
  RgbImage img(300, 200, 7);  // 200 x 901 bytes > 65535: three blocks
  img.set(299, 199, 9, 8, 7);
  const Decoded d = decode(encode_png(img, /*compress=*/false));
  ASSERT_EQ(d.raw.size(), 200u * 901u);
  EXPECT_EQ(uint8_t(d.raw[200 * 901 - 1]), 7);
  EXPECT_EQ(uint8_t(d.raw[200 * 901 - 3]), 9);
  EXPECT_EQ(uint8_t(d.raw[901 + 5]), 7);
}

// The compressed stream (fixed Huffman, run and previous-row matches) inflated by Python's zlib
// gives back the pixels; it is much smaller than the stored one on a heatmap-like image.
TEST(InspectPng, CompressedStreamInflatesToTheImage) {
  const std::string python = test::find_program("python3");
  if (python.empty()) GTEST_SKIP() << "python3 is needed to inflate the stream";
  RgbImage img(700, 90);  // runs of colours, rows repeated, some noise, a width > 258 / 3 pixels
  uint32_t x = 12345;
  for (int y = 0; y < img.height; ++y)
    for (int c = 0; c < img.width; ++c) {
      x = x * 1103515245u + 12345u;
      const auto col = keep_color((c / 37 % 5) / 4.0);
      if (y % 30 < 25) img.set(c, y, col[0], col[1], col[2]);
      if ((x >> 16) % 97 == 0) img.set(c, y, uint8_t(x >> 8), uint8_t(x >> 16), uint8_t(x >> 24));
    }
  const std::string packed = encode_png(img), stored = encode_png(img, false);
  EXPECT_LT(packed.size() * 5, stored.size());
  test::TempDir d("png_compressed");
  {
    std::ofstream(d / "a.png", std::ios::binary) << packed;
  }
  const auto r = test::run_process({python, std::string(KVS_SOURCE_DIR) + "/tests/eval/png_stats.py", d / "a.png"}, d.str(), "stats");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  int w = 0, h = 0, colours = 0;
  double sd = 0;
  uint32_t crc = 0;
  in >> w >> h >> colours >> sd >> crc;
  EXPECT_EQ(w, 700);
  EXPECT_EQ(h, 90);
  EXPECT_EQ(crc, crc32(img.rgb.data(), img.rgb.size()));
}

TEST(InspectPng, RefusesBadSizes) {
  EXPECT_THROW(RgbImage(0, 5), Error);
  EXPECT_THROW(RgbImage(5, 1 << 15), Error);
  RgbImage bad;
  EXPECT_THROW(encode_png(bad), Error);
}

}  // namespace
}  // namespace kvs::inspect
