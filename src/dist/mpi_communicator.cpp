// SPDX-License-Identifier: Apache-2.0
// The Communicator over MPI (compiled when CMake finds an MPI library; Debian's OpenMPI in CI).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "deepinfer/check.h"
#include "dist/communicator.h"

namespace deepinfer {
namespace {

void check_mpi(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    DI_THROW("MPI ", what, " failed: ", std::string(text, size_t(len)));
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

class MpiCommunicator final : public Communicator {
public:
    MpiCommunicator() {
        int initialized = 0;
        MPI_Initialized(&initialized);
        DI_CHECK(!initialized, "MPI is already initialized");
        int provided = 0;
        check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
        // Errors come back as codes (turned into exceptions), not as an abort inside MPI.
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_),
                  "MPI_Comm_split_type");
        MPI_Comm_rank(local_, &local_rank_);
        MPI_Comm_size(local_, &local_size_);
    }
    ~MpiCommunicator() override {
        MPI_Comm_free(&local_);
        MPI_Finalize();
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    int local_rank() const override { return local_rank_; }
    int local_size() const override { return local_size_; }

    void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

    void barrier_polling(const std::function<void()>& poll, double interval_seconds) override {
        MPI_Request req;
        check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
        auto last = std::chrono::steady_clock::now();
        for (int done = 0;;) {
            check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
            if (done) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            if (poll && std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count() >= interval_seconds) {
                poll();
                last = std::chrono::steady_clock::now();
            }
        }
    }

    std::vector<std::vector<int64_t>> allgather(const std::vector<int64_t>& mine) override {
        DI_CHECK(mine.size() < (size_t(1) << 30), "allgather of ", mine.size(), " values");
        const int n = static_cast<int>(mine.size());
        std::vector<int> counts(size_t(size_), 0), displs(size_t(size_), 0);
        check_mpi(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
        int64_t total = 0;
        for (int r = 0; r < size_; ++r) {
            displs[size_t(r)] = static_cast<int>(total);
            total += counts[size_t(r)];
        }
        DI_CHECK(total < (int64_t(1) << 31), "allgather of ", total, " values");
        std::vector<int64_t> all(static_cast<size_t>(total));
        check_mpi(MPI_Allgatherv(mine.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T,
                                 MPI_COMM_WORLD),
                  "MPI_Allgatherv");
        std::vector<std::vector<int64_t>> out(static_cast<size_t>(size_));
        for (int r = 0; r < size_; ++r)
            out[size_t(r)].assign(all.begin() + displs[size_t(r)], all.begin() + displs[size_t(r)] + counts[size_t(r)]);
        return out;
    }

    void allreduce(std::vector<int64_t>& values, ReduceOp op) override {
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_INT64_T, mpi_op(op),
                                MPI_COMM_WORLD),
                  "MPI_Allreduce");
    }
    void allreduce(std::vector<double>& values, ReduceOp op) override {
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, mpi_op(op),
                                MPI_COMM_WORLD),
                  "MPI_Allreduce");
    }

    [[noreturn]] void abort(int exit_code) override {
        std::fflush(stdout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, exit_code);
        std::_Exit(exit_code);
    }

private:
    int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
    MPI_Comm local_ = MPI_COMM_NULL;
};

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace deepinfer
