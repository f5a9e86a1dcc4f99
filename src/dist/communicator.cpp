// SPDX-License-Identifier: Apache-2.0
// The single-process communicator and the launcher's environment.
#include "dist/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "deepinfer/check.h"

namespace deepinfer {
namespace {

// The first of `names` set to an integer, else `fallback`.
int env_int(std::initializer_list<const char*> names, int fallback) {
    for (const char* n : names) {
        const char* v = std::getenv(n);
        if (v == nullptr || *v == '\0') continue;
        char* end = nullptr;
        const long x = std::strtol(v, &end, 10);
        DI_CHECK(end && *end == '\0' && x >= 0 && x < (1 << 24), "environment variable ", n, "='", v,
                 "' is not a rank or size");
        return static_cast<int>(x);
    }
    return fallback;
}

}  // namespace

void SingleProcessCommunicator::abort(int exit_code) {
    std::fflush(stderr);
    std::_Exit(exit_code);
}

LaunchEnvironment launch_environment() {
    // OpenMPI's mpirun sets OMPI_COMM_WORLD_*; PMI launchers (MPICH's hydra, Slurm's srun) PMI_*.
    LaunchEnvironment e;
    e.world_size = env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1);
    e.rank = env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0);
    e.local_size = env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, e.world_size == 1 ? 1 : 0);
    e.local_rank = env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0);
    DI_CHECK(e.world_size >= 1 && e.rank < e.world_size, "launcher environment: rank ", e.rank, " of ", e.world_size);
    return e;
}

#ifndef DI_HAVE_MPI
bool mpi_available() { return false; }

std::unique_ptr<Communicator> make_mpi_communicator() {
    DI_THROW("this deepinfer was built without MPI (install libopenmpi-dev and rebuild; CMake option DI_ENABLE_MPI): "
             "under mpirun every rank would run the whole file");
}
#endif

}  // namespace deepinfer
