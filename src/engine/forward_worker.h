// SPDX-License-Identifier: Apache-2.0
// The engine's forward thread for async scheduling: runs submitted forwards in order on one
// long-lived thread and hands back futures of their outputs (logits and device-sampled tokens).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "deepinfer/model.h"

namespace deepinfer {

// One long-lived thread that runs forwards (async scheduling). Long-lived matters on the CPU
// backend: OpenMP keeps one thread team per calling thread, and a fresh thread per step would build
// a new team every step.
class ForwardWorker {
public:
    ForwardWorker() : thread_([this] { loop(); }) {}
    ~ForwardWorker() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        cv_.notify_one();
        thread_.join();
    }
    std::future<ForwardOutputs> submit(std::function<ForwardOutputs()> fn) {
        std::packaged_task<ForwardOutputs()> task(std::move(fn));
        auto fut = task.get_future();
        {
            std::lock_guard<std::mutex> lock(mu_);
            tasks_.push_back(std::move(task));
        }
        cv_.notify_one();
        return fut;
    }

private:
    void loop() {
        while (true) {
            std::packaged_task<ForwardOutputs()> task;
            {
                std::unique_lock<std::mutex> lock(mu_);
                cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
                if (stop_ && tasks_.empty()) return;
                task = std::move(tasks_.front());
                tasks_.pop_front();
            }
            task();
        }
    }
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::packaged_task<ForwardOutputs()>> tasks_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace deepinfer
