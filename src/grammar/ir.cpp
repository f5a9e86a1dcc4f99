// SPDX-License-Identifier: Apache-2.0
// Grammar IR construction helpers and the canonical text form.
#include "grammar/ir.h"

#include <algorithm>
#include <cstdio>

#include "deepinfer/check.h"

namespace deepinfer::grammar {

std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                                            bool negated, uint32_t max_value, bool skip_surrogates) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (auto& r : ranges) {
        if (r.first > r.second) std::swap(r.first, r.second);
        r.second = std::min(r.second, max_value);
    }
    std::erase_if(ranges, [&](const auto& r) { return r.first > max_value; });
    std::sort(ranges.begin(), ranges.end());
    for (const auto& r : ranges) {
        if (!out.empty() && r.first <= out.back().second + 1) out.back().second = std::max(out.back().second, r.second);
        else out.push_back(r);
    }
    if (negated) {
        std::vector<std::pair<uint32_t, uint32_t>> inv;
        uint32_t next = 0;
        for (const auto& r : out) {
            if (r.first > next) inv.emplace_back(next, r.first - 1);
            next = r.second + 1;
        }
        if (next <= max_value) inv.emplace_back(next, max_value);
        out = std::move(inv);
    }
    if (skip_surrogates) {
        std::vector<std::pair<uint32_t, uint32_t>> cut;
        for (const auto& r : out) {
            if (r.second < 0xD800 || r.first > 0xDFFF) {
                cut.push_back(r);
                continue;
            }
            if (r.first < 0xD800) cut.emplace_back(r.first, 0xD7FF);
            if (r.second > 0xDFFF) cut.emplace_back(0xE000, r.second);
        }
        out = std::move(cut);
    }
    return out;
}

ExprId Grammar::push(Expr e) {
    exprs_.push_back(std::move(e));
    return static_cast<ExprId>(exprs_.size() - 1);
}

ExprId Grammar::empty() { return push({}); }

ExprId Grammar::bytes(std::string_view s) {
    if (s.empty()) return empty();
    Expr e;
    e.kind = ExprKind::kBytes;
    e.bytes = std::string(s);
    return push(std::move(e));
}

ExprId Grammar::char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
    Expr e;
    e.kind = ExprKind::kCharClass;
    e.ranges = normalize_ranges(std::move(ranges), negated);
    return push(std::move(e));
}

ExprId Grammar::byte_class(std::vector<std::pair<uint32_t, uint32_t>> ranges) {
    Expr e;
    e.kind = ExprKind::kByteClass;
    e.ranges = normalize_ranges(std::move(ranges), false, 255, false);
    return push(std::move(e));
}

ExprId Grammar::seq(std::vector<ExprId> children) {
    std::erase_if(children, [&](ExprId c) { return exprs_[size_t(c)].kind == ExprKind::kEmpty; });
    if (children.empty()) return empty();
    if (children.size() == 1) return children[0];
    Expr e;
    e.kind = ExprKind::kSeq;
    e.children = std::move(children);
    return push(std::move(e));
}

ExprId Grammar::alt(std::vector<ExprId> children) {
    if (children.size() == 1) return children[0];
    Expr e;
    e.kind = ExprKind::kAlt;
    e.children = std::move(children);  // empty: matches nothing
    return push(std::move(e));
}

ExprId Grammar::repeat(ExprId child, int32_t min, int32_t max) {
    DI_ICHECK(min >= 0 && (max < 0 || max >= min));
    if (max == 1 && min == 1) return child;
    if (max == 0) return empty();
    Expr e;
    e.kind = ExprKind::kRepeat;
    e.children = {child};
    e.min = min;
    e.max = max;
    return push(std::move(e));
}

ExprId Grammar::ref(int32_t rule) {
    DI_ICHECK(rule >= 0 && rule < static_cast<int32_t>(rules_.size()));
    Expr e;
    e.kind = ExprKind::kRuleRef;
    e.rule = rule;
    return push(std::move(e));
}

int32_t Grammar::declare(std::string_view name) {
    const int32_t found = find_rule(name);
    if (found >= 0) return found;
    rules_.push_back({std::string(name), -1});
    return static_cast<int32_t>(rules_.size() - 1);
}

void Grammar::define(int32_t rule, ExprId body) { rules_[size_t(rule)].body = body; }

int32_t Grammar::add_rule(std::string_view prefix, ExprId body) {
    std::string name(prefix);
    for (int i = 1; find_rule(name) >= 0; ++i) {
        name.assign(prefix.data(), prefix.size());
        name.push_back('_');
        name.append(std::to_string(i));
    }
    rules_.push_back({name, body});
    return static_cast<int32_t>(rules_.size() - 1);
}

int32_t Grammar::find_rule(std::string_view name) const {
    for (size_t i = 0; i < rules_.size(); ++i)
        if (rules_[i].name == name) return static_cast<int32_t>(i);
    return -1;
}

namespace {
void put_cp(std::string& o, uint32_t c, bool byte) {
    char buf[16];
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != ']' && c != '-' && c != '"' && c != '^') {
        o.push_back(char(c));
    } else {
        std::snprintf(buf, sizeof(buf), byte ? "\\x%02X" : "\\U%08X", c);
        o += buf;
    }
}
}  // namespace

std::string Grammar::to_string() const {
    std::string o;
    auto emit = [&](auto&& self, ExprId id) -> void {
        const Expr& e = exprs_[size_t(id)];
        switch (e.kind) {
            case ExprKind::kEmpty: o += "\"\""; break;
            case ExprKind::kBytes:
                o += '"';
                for (unsigned char c : e.bytes) put_cp(o, c, true);
                o += '"';
                break;
            case ExprKind::kCharClass:
            case ExprKind::kByteClass: {
                const bool byte = e.kind == ExprKind::kByteClass;
                o += byte ? "[#" : "[";
                for (const auto& [a, b] : e.ranges) {
                    put_cp(o, a, byte);
                    if (b != a) {
                        o += '-';
                        put_cp(o, b, byte);
                    }
                }
                o += ']';
                break;
            }
            case ExprKind::kSeq:
            case ExprKind::kAlt:
                o += '(';
                for (size_t i = 0; i < e.children.size(); ++i) {
                    if (i) o += e.kind == ExprKind::kSeq ? " " : " | ";
                    self(self, e.children[i]);
                }
                o += ')';
                break;
            case ExprKind::kRepeat:
                self(self, e.children[0]);
                o.push_back('{');
                o.append(std::to_string(e.min));
                o.push_back(',');
                if (e.max >= 0) o.append(std::to_string(e.max));
                o.push_back('}');
                break;
            case ExprKind::kRuleRef: o += rules_[size_t(e.rule)].name; break;
        }
    };
    for (size_t r = 0; r < rules_.size(); ++r) {
        o += rules_[r].name;
        o += static_cast<int32_t>(r) == root_ ? " (root) ::= " : " ::= ";
        if (rules_[r].body >= 0) emit(emit, rules_[r].body);
        o += '\n';
    }
    return o;
}

}  // namespace deepinfer::grammar
