#ifndef BITPARITY_CORE_DISPLAY_TEXT_H_
#define BITPARITY_CORE_DISPLAY_TEXT_H_

// Text from the user (a layout, a path, a name) as a message or a report shows it: valid UTF-8
// kept, and every byte a terminal or an XML reader must not see raw written as the visible text
// "\xNN". Torch-free.

#include <cstddef>
#include <string>

namespace bitparity {

// The bytes of the valid UTF-8 character starting at `s[i]` (1 for ASCII), or 0 when none
// starts there (a continuation byte, a bad lead byte, a truncated sequence, an overlong form, a
// surrogate, a code point past U+10FFFF).
size_t Utf8CharacterLength(const std::string& s, size_t i);

// `text` with each control byte (below 0x20 and DEL; tab, newline and carriage return kept when
// `keep_whitespace`), each byte outside valid UTF-8 and U+FFFE and U+FFFF (no XML characters)
// written as "\xNN".
std::string EscapedText(const std::string& text, bool keep_whitespace);

}  // namespace bitparity

#endif  // BITPARITY_CORE_DISPLAY_TEXT_H_
