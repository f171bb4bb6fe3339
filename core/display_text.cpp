#include "core/display_text.h"

namespace bitparity {

size_t Utf8CharacterLength(const std::string& s, size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  if (lead < 0x80) return 1;
  const size_t n = lead >= 0xF0 && lead < 0xF5   ? 4
                   : lead >= 0xE0 && lead < 0xF0 ? 3
                   : lead >= 0xC2 && lead < 0xE0 ? 2
                                                 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  // The second byte's narrower ranges (Unicode's table 3-7): no overlong form (E0, F0), no
  // surrogate (ED), nothing past U+10FFFF (F4).
  const auto second = static_cast<unsigned char>(s[i + 1]);
  if ((lead == 0xE0 && second < 0xA0) || (lead == 0xED && second > 0x9F) ||
      (lead == 0xF0 && second < 0x90) || (lead == 0xF4 && second > 0x8F)) {
    return 0;
  }
  return n;
}

namespace {

// U+FFFE and U+FFFF: valid UTF-8, but no XML 1.0 character.
bool IsXmlNoncharacter(const std::string& s, size_t i, size_t n) {
  return n == 3 && static_cast<unsigned char>(s[i]) == 0xEF &&
         static_cast<unsigned char>(s[i + 1]) == 0xBF &&
         static_cast<unsigned char>(s[i + 2]) >= 0xBE;
}

}  // namespace

std::string EscapedText(const std::string& text, bool keep_whitespace) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = Utf8CharacterLength(text, i);
    const bool whitespace = c == '\t' || c == '\n' || c == '\r';
    if (n == 0 || c == 0x7F || (c < 0x20 && !(keep_whitespace && whitespace)) ||
        IsXmlNoncharacter(text, i, n)) {
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 0xF];
      ++i;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace bitparity
