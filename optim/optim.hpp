// xgrad's optimizers, LR schedules and gradient clipping in one include.
#pragma once

#include "optim/adam.hpp"
#include "optim/clip.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "optim/sgd.hpp"
