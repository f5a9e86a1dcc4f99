// SPDX-License-Identifier: Apache-2.0
// V41Model's implementation (include/deepinfer/model_v41.h): the CED stack of spec §2-§4 with the
// single-pass mHC schedule (each site collapses with the previous site's `pre`), Engram before its
// layers, final collapse with the last FFN site's `pre`, norm and head.
#pragma once

#include "deepinfer/model_v41.h"
