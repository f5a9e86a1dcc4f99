// SPDX-License-Identifier: Apache-2.0
// OpenMP thread-count setting.
#include "deepinfer/parallel.h"

#include <omp.h>

namespace deepinfer {

int cpu_num_threads() { return omp_get_max_threads(); }

int cpu_num_cores() { return omp_get_num_procs(); }

void set_cpu_num_threads(int n) { omp_set_num_threads(n > 0 ? n : omp_get_num_procs()); }

}  // namespace deepinfer
