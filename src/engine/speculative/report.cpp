// SPDX-License-Identifier: Apache-2.0
#include "engine/speculative/report.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace deepinfer {

std::string speculative_summary(const EngineMetrics& m) {
    if (m.spec_steps == 0) return {};
    char buf[1024];
    std::string acc;
    for (size_t j = 0; j < m.spec_position_verified.size(); ++j) {
        // Conditional acceptance: of the drafts verified at position j (all earlier ones accepted).
        const int64_t v = m.spec_position_verified[j];
        std::snprintf(buf, sizeof buf, "%s%.2f", j ? "/" : "", v ? double(m.spec_position_accepted[j]) / double(v) : 0.0);
        acc += buf;
    }
    std::string cal;
    for (size_t j = 0; j < m.spec_calibration_error.size(); ++j) {
        std::snprintf(buf, 32, "%s%.2f", j ? "/" : "", m.spec_calibration_error[j]);
        cal += buf;
    }
    std::snprintf(buf, sizeof buf,
                  "speculative: mean accepted length %.3f (%lld of %lld drafts accepted), acceptance by position %s, "
                  "%.2f verify tokens per step, mean draft budget %.2f, %lld plain steps, confidence error by position %s, "
                  "draft %.2f s vs forward %.2f s",
                  m.mean_accepted_length(), (long long)m.spec_accepted_tokens, (long long)m.spec_draft_tokens,
                  acc.c_str(), double(m.spec_verify_tokens) / double(m.spec_steps),
                  double(m.spec_budget_sum) / double(m.spec_steps), (long long)m.spec_plain_steps, cal.c_str(), m.draft_seconds, m.forward_seconds);
    std::string out = buf;
    if (m.device_verified_rows > 0) {
        std::snprintf(buf, sizeof buf, ", %lld verify rows decided on the device", (long long)m.device_verified_rows);
        out += buf;
    }
    return out;
}

std::string speculative_trace_line(const SpeculativeTraceStep& t) {
    return nlohmann::json{{"step", t.step},
                          {"decode_only", t.decode_only},
                          {"decode_rows", t.decode_rows},
                          {"rows", t.shape.tokens},
                          {"tapped", t.shape.drafter_taps},
                          {"drafted", t.shape.drafted_requests},
                          {"verifying", t.verifying},
                          {"drafts", t.drafts},
                          {"accepted", t.accepted},
                          {"step_s", t.step_seconds},
                          {"draft_s", t.draft_seconds},
                          {"predicted_step_s", t.predicted_step_seconds},
                          {"predicted_draft_s", t.predicted_draft_seconds},
                          {"expected_gain", t.expected_gain}}
        .dump();
}

}  // namespace deepinfer
