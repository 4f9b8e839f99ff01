// Every loss and its helpers, for users who want them all: #include "losses/losses.hpp".
#pragma once

#include "losses/cross_entropy.hpp"
#include "losses/linear_cross_entropy.hpp"
#include "losses/linear_token_logprobs.hpp"
#include "losses/dpo.hpp"
#include "losses/grpo.hpp"
#include "losses/kl.hpp"
#include "losses/logprobs.hpp"
#include "losses/masked.hpp"
#include "losses/ppo.hpp"
#include "losses/reduction.hpp"
#include "losses/sft.hpp"
