// SPDX-License-Identifier: Apache-2.0
// Two merge loops with identical results: for short pieces (almost all of them) an array of
// symbols and their pair ranks, rescanned after each merge; for long pieces a linked list and a
// min-heap of candidate merges ordered by (rank, position), with stale entries skipped.
#include "tokenizer/bpe.h"

#include <algorithm>

#include "deepinfer/check.h"

namespace deepinfer {

namespace {
// Pieces up to this many bytes use the quadratic loop; it is faster than a heap there.
constexpr size_t kSmallPiece = 48;
}  // namespace

void BpeModel::add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank) {
    pending_.push_back({pair_key(left, right), rank, merged});
}

void BpeModel::finalize() {
    size_t capacity = 16;
    while (capacity < pending_.size() * 2) capacity *= 2;
    table_.assign(capacity, Entry{kEmptyKey, kNoRank, -1});
    mask_ = capacity - 1;
    shift_ = 64 - __builtin_ctzll(capacity);
    num_merges_ = 0;
    for (const Entry& e : pending_) {
        size_t i = (e.key * 0x9E3779B97F4A7C15ull) >> shift_;
        while (table_[i].key != kEmptyKey && table_[i].key != e.key) i = (i + 1) & mask_;
        if (table_[i].key == e.key) continue;  // duplicate pair: the first (lowest rank) wins
        table_[i] = e;
        ++num_merges_;
    }
    pending_.clear();
    pending_.shrink_to_fit();
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    thread_local std::vector<int32_t> ids;
    ids.clear();
    for (unsigned char b : piece) {
        const int32_t id = byte_ids_[b];
        if (id >= 0) ids.push_back(id);
    }
    const size_t n = ids.size();
    if (n == 0) return;
    if (n == 1) {
        out.push_back(ids[0]);
        return;
    }
    if (n <= kSmallPiece)
        encode_small(ids.data(), n, out);
    else
        encode_large(ids.data(), n, out);
}

void BpeModel::encode_small(const int32_t* input, size_t n, std::vector<int32_t>& out) const {
    int32_t sym[kSmallPiece];
    uint32_t rank[kSmallPiece];  // rank[i]: rank of the pair (sym[i], sym[i + 1])
    std::copy(input, input + n, sym);
    for (size_t i = 0; i + 1 < n; ++i) rank[i] = rank_of(sym[i], sym[i + 1]);
    while (n > 1) {
        size_t best = 0;
        uint32_t best_rank = rank[0];
        for (size_t i = 1; i + 1 < n; ++i) {
            if (rank[i] < best_rank) {
                best_rank = rank[i];
                best = i;
            }
        }
        if (best_rank == kNoRank) break;
        sym[best] = lookup(sym[best], sym[best + 1])->merged;
        // Remove symbol best+1 and the pair that started at it.
        for (size_t i = best + 1; i + 1 < n; ++i) sym[i] = sym[i + 1];
        for (size_t i = best + 1; i + 2 < n; ++i) rank[i] = rank[i + 1];
        --n;
        if (best > 0) rank[best - 1] = rank_of(sym[best - 1], sym[best]);
        if (best + 1 < n) rank[best] = rank_of(sym[best], sym[best + 1]);
    }
    out.insert(out.end(), sym, sym + n);
}

void BpeModel::encode_large(const int32_t* input, size_t n, std::vector<int32_t>& out) const {
    struct Symbol {
        int32_t id;
        int32_t prev;  // -1: none
        int32_t next;  // -1: none
        bool alive;
    };
    struct Candidate {
        uint32_t rank;
        int32_t pos;  // position of the left symbol
        int32_t left, right;
        bool operator>(const Candidate& o) const {
            return rank != o.rank ? rank > o.rank : pos > o.pos;
        }
    };
    thread_local std::vector<Symbol> syms;
    thread_local std::vector<Candidate> heap;  // a min-heap through std::push_heap/pop_heap
    const auto heap_order = [](const Candidate& a, const Candidate& b) { return a > b; };
    syms.resize(n);
    for (size_t i = 0; i < n; ++i)
        syms[i] = {input[i], static_cast<int32_t>(i) - 1,
                   i + 1 < n ? static_cast<int32_t>(i + 1) : -1, true};
    heap.clear();
    auto push = [&](int32_t pos) {
        const int32_t next = syms[pos].next;
        if (next < 0) return;
        const Entry* e = lookup(syms[pos].id, syms[next].id);
        if (e == nullptr) return;
        heap.push_back({e->rank, pos, syms[pos].id, syms[next].id});
        std::push_heap(heap.begin(), heap.end(), heap_order);
    };
    for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), heap_order);
        const Candidate c = heap.back();
        heap.pop_back();
        Symbol& left = syms[c.pos];
        // Stale if either symbol changed since the candidate was pushed: merged tokens only
        // grow, so an id can never come back at the same position.
        if (!left.alive || left.id != c.left || left.next < 0) continue;
        Symbol& right = syms[left.next];
        if (right.id != c.right) continue;
        left.id = lookup(c.left, c.right)->merged;
        right.alive = false;
        left.next = right.next;
        if (right.next >= 0) syms[right.next].prev = c.pos;
        if (left.prev >= 0) push(left.prev);
        push(c.pos);
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace deepinfer
