// SPDX-License-Identifier: Apache-2.0
// RankThreads: one host thread per GPU of an expert-parallel replica, each with its GPU as the
// current device for its whole life. run_all runs one function on every rank at once (the ranks of a
// forward must enqueue their NCCL calls concurrently) and waits for all; run_one runs on one rank.
// An exception on a rank is rethrown by the call (the first one, by rank order).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer::cuda {

class RankThreads {
public:
    explicit RankThreads(const std::vector<int>& devices);
    ~RankThreads();
    RankThreads(const RankThreads&) = delete;
    RankThreads& operator=(const RankThreads&) = delete;

    int size() const { return static_cast<int>(workers_.size()); }
    void run_all(const std::function<void(int rank)>& f);
    void run_one(int rank, const std::function<void()>& f);

private:
    struct Worker {
        std::thread thread;
        std::mutex mutex;
        std::condition_variable cv;
        std::function<void()> job;  // guarded by mutex
        bool has_job = false, done = false, stop = false;
        std::exception_ptr error;
    };
    void loop(Worker& w, int device);
    void start(int rank, std::function<void()> job);
    void wait(int rank);

    std::vector<std::unique_ptr<Worker>> workers_;
    std::mutex call_mutex_;  // one run_all / run_one at a time
};

}  // namespace deepinfer::cuda
