// SPDX-License-Identifier: Apache-2.0
// The few collective operations data parallelism needs (multi-replica `deepinfer run`), behind an
// interface so the batch runner does not depend on MPI: `make_mpi_communicator` (OpenMPI, when the
// build found it) or `SingleProcessCommunicator` (one rank; also used to finish a multi-replica
// job's merge from one process). Every call is collective: all ranks make the same calls in the
// same order, from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace deepinfer {

enum class ReduceOp { kSum, kMax };

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual int local_rank() const = 0;  // among the ranks on this host
    virtual int local_size() const = 0;
    virtual void barrier() = 0;
    // A barrier during which `poll` runs about every `interval_seconds` (rank 0's progress while it
    // waits for the slower replicas).
    virtual void barrier_polling(const std::function<void()>& poll, double interval_seconds) = 0;
    // Every rank's vector (lengths may differ), in rank order.
    virtual std::vector<std::vector<int64_t>> allgather(const std::vector<int64_t>& mine) = 0;
    virtual void allreduce(std::vector<int64_t>& values, ReduceOp op) = 0;
    virtual void allreduce(std::vector<double>& values, ReduceOp op) = 0;
    // Ends every rank of the job at once (a failed rank must not leave the others in a collective).
    [[noreturn]] virtual void abort(int exit_code) = 0;
};

class SingleProcessCommunicator final : public Communicator {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    int local_rank() const override { return 0; }
    int local_size() const override { return 1; }
    void barrier() override {}
    void barrier_polling(const std::function<void()>&, double) override {}
    std::vector<std::vector<int64_t>> allgather(const std::vector<int64_t>& mine) override { return {mine}; }
    void allreduce(std::vector<int64_t>&, ReduceOp) override {}
    void allreduce(std::vector<double>&, ReduceOp) override {}
    [[noreturn]] void abort(int exit_code) override;
};

// What the process launcher (mpirun / srun with PMI) says about this process, read from the
// environment before MPI is initialized: world_size 1 when not launched as part of a job.
struct LaunchEnvironment {
    int world_size = 1;
    int rank = 0;
    int local_rank = 0;
    int local_size = 1;
};
LaunchEnvironment launch_environment();

// True when this build has MPI (CMake found it; DI_ENABLE_MPI).
bool mpi_available();

// Initializes MPI (MPI_THREAD_FUNNELED: collectives from the main thread only) and returns the
// world communicator; finalized when destroyed. Throws when the build has no MPI.
std::unique_ptr<Communicator> make_mpi_communicator();

}  // namespace deepinfer
