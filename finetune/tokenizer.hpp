// The byte-level tokenizer of xgrad's models, under its finetune name: it is
// xg::text::ByteTokenizer (text/byte_tokenizer.hpp), one implementation of xg::text::Tokenizer.
#pragma once

#include "text/byte_tokenizer.hpp"

namespace xg::finetune {

using ByteTokenizer = xg::text::ByteTokenizer;

}  // namespace xg::finetune
