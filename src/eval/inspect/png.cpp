#include "eval/inspect/png.h"

#include <algorithm>
#include <array>

#include "core/atomic_output.h"
#include "core/error.h"

namespace kvs::inspect {

namespace {

constexpr int kMaxSide = 1 << 14;

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> a{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      a[n] = c;
    }
    return a;
  }();
  return t;
}

void put_u32be(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xFF));
}

// length | type | data | CRC(type + data)
void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32be(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.append(type, 4);
  out += data;
  put_u32be(out, crc32(reinterpret_cast<const uint8_t*>(out.data() + start), out.size() - start));
}

// zlib stream of stored deflate blocks (at most 65535 bytes each) + Adler-32.
std::string zlib_stored(const std::string& raw) {
  std::string z;
  z.push_back(0x78);  // CM 8, CINFO 7 (32 KiB window)
  z.push_back(0x01);  // FLEVEL 0, no dictionary; 0x7801 % 31 == 0
  size_t off = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - off);
    const bool last = off + n == raw.size();
    z.push_back(static_cast<char>(last ? 1 : 0));  // BFINAL, BTYPE 00 (stored)
    z.push_back(static_cast<char>(n & 0xFF));
    z.push_back(static_cast<char>(n >> 8));
    z.push_back(static_cast<char>(~n & 0xFF));
    z.push_back(static_cast<char>((~n >> 8) & 0xFF));
    z.append(raw, off, n);
    off += n;
  } while (off < raw.size());
  put_u32be(z, adler32(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
  return z;
}

// Bits into bytes, least significant first (deflate's order).
class BitWriter {
 public:
  explicit BitWriter(std::string& out) : out_(out) {}
  void put(uint32_t bits, int n) {  // the low n bits of `bits`, LSB first
    acc_ |= uint64_t{bits} << fill_;
    fill_ += n;
    while (fill_ >= 8) {
      out_.push_back(static_cast<char>(acc_ & 0xFF));
      acc_ >>= 8;
      fill_ -= 8;
    }
  }
  // A Huffman code: written most significant bit first.
  void put_code(uint32_t code, int n) {
    uint32_t r = 0;
    for (int i = 0; i < n; ++i) r |= ((code >> i) & 1u) << (n - 1 - i);
    put(r, n);
  }
  void flush() {
    if (fill_ > 0) out_.push_back(static_cast<char>(acc_ & 0xFF));
    acc_ = 0;
    fill_ = 0;
  }

 private:
  std::string& out_;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

// The fixed Huffman code of a literal/length symbol 0..287 (RFC 1951, 3.2.6).
void put_litlen(BitWriter& w, int sym) {
  if (sym < 144) w.put_code(0x30 + sym, 8);
  else if (sym < 256) w.put_code(0x190 + sym - 144, 9);
  else if (sym < 280) w.put_code(sym - 256, 7);
  else w.put_code(0xC0 + sym - 280, 8);
}

void put_length(BitWriter& w, int len) {  // 3..258
  static constexpr int base[] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
  static constexpr int extra[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
  int i = 28;
  while (base[i] > len) --i;
  put_litlen(w, 257 + i);
  if (extra[i]) w.put(static_cast<uint32_t>(len - base[i]), extra[i]);
}

void put_distance(BitWriter& w, int dist) {  // 1..32768
  static constexpr int base[] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
                                 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
  int i = 29;
  while (base[i] > dist) --i;
  w.put_code(static_cast<uint32_t>(i), 5);
  const int extra = i < 4 ? 0 : i / 2 - 1;
  if (extra) w.put(static_cast<uint32_t>(dist - base[i]), extra);
}

// zlib stream of one fixed-Huffman deflate block. Matches are looked for at two distances only:
// the previous pixel (`bpp`) and the previous scanline (`stride`), which is what a heatmap repeats
// (runs of one colour, identical rows within a layer).
std::string zlib_fixed(const std::string& raw, int bpp, int stride) {
  std::string z;
  z.push_back(0x78);
  z.push_back(0x01);
  BitWriter w(z);
  w.put(1, 1);  // BFINAL
  w.put(1, 2);  // BTYPE 01: fixed Huffman
  const size_t n = raw.size();
  size_t i = 0;
  while (i < n) {
    int best_len = 0, best_dist = 0;
    for (int dist : {bpp, stride}) {
      if (dist <= 0 || dist > 32768 || static_cast<size_t>(dist) > i) continue;
      int len = 0;
      while (len < 258 && i + static_cast<size_t>(len) < n && raw[i + static_cast<size_t>(len)] == raw[i + static_cast<size_t>(len) - static_cast<size_t>(dist)])
        ++len;
      if (len > best_len) {
        best_len = len;
        best_dist = dist;
      }
    }
    if (best_len >= 3) {
      put_length(w, best_len);
      put_distance(w, best_dist);
      i += static_cast<size_t>(best_len);
    } else {
      put_litlen(w, static_cast<uint8_t>(raw[i]));
      ++i;
    }
  }
  put_litlen(w, 256);  // end of block
  w.flush();
  put_u32be(z, adler32(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
  return z;
}

}  // namespace

RgbImage::RgbImage(int w, int h, uint8_t fill) : width(w), height(h) {
  if (w <= 0 || h <= 0 || w > kMaxSide || h > kMaxSide)
    fail("image size {} x {} is out of range (1..{} on a side)", w, h, kMaxSide);
  rgb.assign(static_cast<size_t>(w) * h * 3, fill);
}

void RgbImage::set(int x, int y, uint8_t r, uint8_t g, uint8_t b) {
  KVS_ASSERT(x >= 0 && x < width && y >= 0 && y < height);
  uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
  p[0] = r;
  p[1] = g;
  p[2] = b;
}

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  const auto& t = crc_table();
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = t[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler) {
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  for (size_t i = 0; i < n; ++i) {
    a = (a + data[i]) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

std::string encode_png(const RgbImage& img, bool compress) {
  if (img.width <= 0 || img.height <= 0 || img.width > kMaxSide || img.height > kMaxSide ||
      img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3)
    fail("PNG: image of {} x {} with {} bytes is not a valid RGB image", img.width, img.height, img.rgb.size());
  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  put_u32be(ihdr, static_cast<uint32_t>(img.width));
  put_u32be(ihdr, static_cast<uint32_t>(img.height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // depth 8, color type 2 (RGB), deflate, filter 0, no interlace
  put_chunk(out, "IHDR", ihdr);
  // Scanlines: filter byte 0 (None) + the row.  // [height][1 + width * 3]
  const size_t row = static_cast<size_t>(img.width) * 3;
  std::string raw;
  raw.reserve((row + 1) * img.height);
  for (int y = 0; y < img.height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(img.rgb.data() + y * row), row);
  }
  put_chunk(out, "IDAT", compress ? zlib_fixed(raw, 3, static_cast<int>(row + 1)) : zlib_stored(raw));
  put_chunk(out, "IEND", std::string());
  return out;
}

void write_png(const std::string& path, const RgbImage& img) { write_file_atomic(path, encode_png(img)); }

}  // namespace kvs::inspect
