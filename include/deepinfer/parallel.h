// SPDX-License-Identifier: Apache-2.0
// CPU threading: the CPU backend parallelizes with OpenMP; these wrap its thread-count setting so
// frontends need not include omp.h. Results never depend on the thread count.
#pragma once

namespace deepinfer {

int cpu_num_threads();
// The cores OpenMP may use (the default thread count).
int cpu_num_cores();
// n <= 0 restores the default (one thread per core).
void set_cpu_num_threads(int n);

}  // namespace deepinfer
