// The Unicode pieces the tokenizers share: UTF-8 reading, writing and checking, Rust's lossy
// UTF-8 decoding (what Hugging Face's decoders produce for broken byte sequences), White_Space,
// GPT-2's byte <-> character map, and Unicode normalization (NFC).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xg::text {

// The length of the well-formed UTF-8 sequence at s[i], or 0 when it is not one.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);
// The offset of the first byte that is not well-formed UTF-8, or npos when all of s is.
std::size_t utf8_invalid_at(std::string_view s);
// The code point of the well-formed sequence at s[i] (of length n).
uint32_t utf8_decode(std::string_view s, std::size_t i, std::size_t n);
void utf8_append(std::string& out, uint32_t cp);

// Bytes as text the way Rust's String::from_utf8_lossy reads them: each maximal ill-formed
// subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Unicode's White_Space property (Rust's char::is_whitespace).
bool is_unicode_whitespace(uint32_t cp);

// GPT-2's byte-level alphabet: each byte as a printable character ('!'..'~', '¡'..'¬',
// '®'..'ÿ' as themselves, the other 68 bytes as U+0100.. in byte order), in UTF-8.
const std::array<std::string, 256>& byte_level_chars();
// The bytes a byte-level token spells ("Ġthe" -> " the"), or nullopt when one of its
// characters is outside the alphabet.
std::optional<std::string> byte_level_bytes(std::string_view token);

// s in Unicode Normalization Form C (ICU's); ASCII and text already in NFC come back unchanged.
std::string nfc(std::string_view s);

}  // namespace xg::text
