// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/ep/rank_threads.h"

#include "backends/cuda/cuda_backend.h"
#include "deepinfer/check.h"

namespace deepinfer::cuda {

RankThreads::RankThreads(const std::vector<int>& devices) {
    for (int d : devices) {
        auto w = std::make_unique<Worker>();
        Worker* p = w.get();
        w->thread = std::thread([this, p, d] { loop(*p, d); });
        workers_.push_back(std::move(w));
    }
}

RankThreads::~RankThreads() {
    for (auto& w : workers_) {
        {
            std::lock_guard<std::mutex> lock(w->mutex);
            w->stop = true;
        }
        w->cv.notify_all();
    }
    for (auto& w : workers_) w->thread.join();
}

void RankThreads::loop(Worker& w, int device) {
    bool device_set = false;
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lock(w.mutex);
            w.cv.wait(lock, [&] { return w.has_job || w.stop; });
            if (w.stop) return;
            job = std::move(w.job);
            w.has_job = false;
        }
        std::exception_ptr error;
        try {
            if (!device_set) {
                set_current_device(device);
                device_set = true;
            }
            job();
        } catch (...) {
            error = std::current_exception();
        }
        {
            std::lock_guard<std::mutex> lock(w.mutex);
            w.error = error;
            w.done = true;
        }
        w.cv.notify_all();
    }
}

void RankThreads::start(int rank, std::function<void()> job) {
    Worker& w = *workers_[size_t(rank)];
    {
        std::lock_guard<std::mutex> lock(w.mutex);
        w.job = std::move(job);
        w.has_job = true;
        w.done = false;
        w.error = nullptr;
    }
    w.cv.notify_all();
}

void RankThreads::wait(int rank) {
    Worker& w = *workers_[size_t(rank)];
    std::unique_lock<std::mutex> lock(w.mutex);
    w.cv.wait(lock, [&] { return w.done; });
}

void RankThreads::run_all(const std::function<void(int)>& f) {
    std::lock_guard<std::mutex> call(call_mutex_);
    for (int r = 0; r < size(); ++r) start(r, [&f, r] { f(r); });
    std::exception_ptr first;
    for (int r = 0; r < size(); ++r) {
        wait(r);
        if (!first && workers_[size_t(r)]->error) first = workers_[size_t(r)]->error;
    }
    if (first) std::rethrow_exception(first);
}

void RankThreads::run_one(int rank, const std::function<void()>& f) {
    DI_CHECK(rank >= 0 && rank < size(), "rank ", rank, " of ", size());
    std::lock_guard<std::mutex> call(call_mutex_);
    start(rank, f);
    wait(rank);
    if (auto e = workers_[size_t(rank)]->error) std::rethrow_exception(e);
}

}  // namespace deepinfer::cuda
