// SPDX-License-Identifier: Apache-2.0
// Loading tokenizer.json and the encode/decode entry points. Encoding: sanitize UTF-8, cut out
// added tokens, pre-tokenize each remaining run, BPE each piece. Decoding mirrors Hugging Face's
// `decode`: consecutive vocabulary tokens form one chunk of bytes, every added token is a chunk
// of its own, and each chunk is converted to text with U+FFFD for invalid bytes.
#include "deepinfer/tokenizer.h"

#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "deepinfer/check.h"
#include "deepinfer/log.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer {

struct Tokenizer::Impl {
    enum Flags : uint8_t { kKnown = 1, kAdded = 2, kSpecial = 4 };

    std::string origin;
    std::vector<std::string> token_text;  // id -> tokenizer.json spelling
    std::vector<std::string> bytes;       // id -> the bytes it decodes to
    std::vector<uint8_t> flags;           // id -> Flags
    std::unordered_map<std::string, int32_t> vocab;  // tokenizer.json spelling -> id
    std::unordered_map<std::string, int32_t> added_by_content;
    std::unordered_map<std::string, int32_t> vocab_by_bytes;  // only with ignore_merges
    std::vector<AddedToken> added;
    std::unique_ptr<AddedVocabulary> added_vocab;
    std::unique_ptr<PreTokenizer> pre_tokenizer;
    std::unique_ptr<BpeModel> bpe;
    bool ignore_merges = false;

    // `text` must be valid UTF-8.
    void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;
    void encode(std::string_view text, std::vector<int32_t>& out) const;
};

namespace {

using json = nlohmann::json;

// The bytes a byte-level spelling stands for; nullopt when a character is outside the byte
// alphabet (then the token decodes to its own UTF-8 text, as Hugging Face's ByteLevel does).
std::optional<std::string> byte_level_decode(std::string_view spelling) {
    std::string out;
    out.reserve(spelling.size());
    const auto* p = reinterpret_cast<const unsigned char*>(spelling.data());
    size_t i = 0;
    while (i < spelling.size()) {
        auto st = utf8::step(p + i, spelling.size() - i);
        if (st.kind != utf8::Step::kValid) return std::nullopt;
        const int b = utf8::code_point_to_byte(st.code_point);
        if (b < 0) return std::nullopt;
        out.push_back(static_cast<char>(b));
        i += st.len;
    }
    return out;
}

std::string decoded_bytes(const std::string& spelling) {
    auto b = byte_level_decode(spelling);
    return b ? *b : spelling;
}

void check_supported_model(const json& model, const std::string& origin) {
    DI_CHECK(model.is_object(), origin, ": no \"model\" object");
    const std::string type = model.value("type", std::string("BPE"));
    DI_CHECK(type == "BPE", origin, ": model type \"", type, "\" is not supported (only BPE)");
    auto null_or_empty = [&](const char* key) {
        if (!model.contains(key) || model[key].is_null()) return true;
        return model[key].is_string() && model[key].get<std::string>().empty();
    };
    DI_CHECK(!model.contains("dropout") || model["dropout"].is_null() || model["dropout"] == 0.0,
             origin, ": BPE dropout is not supported");
    DI_CHECK(null_or_empty("continuing_subword_prefix"), origin,
             ": BPE continuing_subword_prefix is not supported");
    DI_CHECK(null_or_empty("end_of_word_suffix"), origin, ": BPE end_of_word_suffix is not supported");
    DI_CHECK(!model.value("byte_fallback", false), origin, ": BPE byte_fallback is not supported");
}

void check_supported_normalizer(const json& normalizer, const std::string& origin) {
    if (normalizer.is_null()) return;
    const std::string type = normalizer.value("type", std::string());
    DI_CHECK(type == "Sequence" && normalizer.value("normalizers", json::array()).empty(), origin,
             ": normalizer \"", type, "\" is not supported (only none or an empty Sequence)");
}

void check_supported_decoder(const json& decoder, const std::string& origin) {
    DI_CHECK(!decoder.is_null(), origin, ": tokenizer has no decoder; only ByteLevel is supported");
    const std::string type = decoder.value("type", std::string());
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
        for (const auto& d : decoder.at("decoders")) check_supported_decoder(d, origin);
        return;
    }
    DI_THROW(origin, ": decoder \"", type, "\" is not supported (only ByteLevel)");
}

}  // namespace

// ---- Loading ----------------------------------------------------------------------------------

Tokenizer Tokenizer::from_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    DI_CHECK(in.good(), "cannot open tokenizer file ", path);
    std::stringstream ss;
    ss << in.rdbuf();
    return from_json(ss.str(), path);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& origin) {
    json root;
    try {
        root = json::parse(json_text);
    } catch (const json::exception& e) {
        DI_THROW(origin, ": not valid JSON: ", e.what());
    }
    DI_CHECK(root.is_object(), origin, ": not a tokenizer.json (top level is not an object)");
    auto impl = std::make_shared<Impl>();
    impl->origin = origin;
    try {
        const json& model = root.value("model", json());
        check_supported_model(model, origin);
        check_supported_normalizer(root.value("normalizer", json()), origin);
        check_supported_decoder(root.value("decoder", json()), origin);
        DI_CHECK(root.value("truncation", json()).is_null(), origin, ": truncation is not supported");
        impl->ignore_merges = model.value("ignore_merges", false);
        impl->pre_tokenizer =
            std::make_unique<PreTokenizer>(PreTokenizer::from_json(root.value("pre_tokenizer", json())));

        // Vocabulary.
        const json& vocab = model.at("vocab");
        DI_CHECK(vocab.is_object(), origin, ": model.vocab is not an object");
        int32_t max_id = -1;
        for (const auto& [token, id_json] : vocab.items()) {
            const auto id = id_json.get<int64_t>();
            DI_CHECK(id >= 0 && id < (int64_t(1) << 30), origin, ": bad id ", id, " for token ", token);
            max_id = std::max(max_id, static_cast<int32_t>(id));
        }
        const auto model_vocab_size = static_cast<int32_t>(vocab.size());
        auto grow = [&](int32_t id) {
            if (static_cast<size_t>(id) >= impl->token_text.size()) {
                impl->token_text.resize(size_t(id) + 1);
                impl->bytes.resize(size_t(id) + 1);
                impl->flags.resize(size_t(id) + 1, 0);
            }
        };
        grow(max_id);
        impl->vocab.reserve(vocab.size());
        for (const auto& [token, id_json] : vocab.items()) {
            const auto id = id_json.get<int32_t>();
            impl->vocab.emplace(token, id);
            impl->token_text[id] = token;
            impl->bytes[id] = decoded_bytes(token);
            impl->flags[id] |= Impl::kKnown;
        }

        // Byte tokens and merges.
        std::array<int32_t, 256> byte_ids{};
        const auto& cps = utf8::byte_to_code_point();
        for (int b = 0; b < 256; ++b) {
            std::string spelling;
            utf8::append_code_point(cps[b], spelling);
            auto it = impl->vocab.find(spelling);
            byte_ids[b] = it == impl->vocab.end() ? -1 : it->second;
        }
        impl->bpe = std::make_unique<BpeModel>(byte_ids);
        const json& merges = model.at("merges");
        DI_CHECK(merges.is_array(), origin, ": model.merges is not an array");
        uint32_t rank = 0;
        for (const auto& m : merges) {
            std::string left, right;
            if (m.is_string()) {
                const std::string s = m.get<std::string>();
                const size_t sp = s.find(' ');
                DI_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, origin,
                         ": merge \"", s, "\" is not two tokens separated by one space");
                left = s.substr(0, sp);
                right = s.substr(sp + 1);
            } else {
                DI_CHECK(m.is_array() && m.size() == 2, origin, ": merge entry is not a pair");
                left = m[0].get<std::string>();
                right = m[1].get<std::string>();
            }
            auto l = impl->vocab.find(left), r = impl->vocab.find(right),
                 mg = impl->vocab.find(left + right);
            DI_CHECK(l != impl->vocab.end() && r != impl->vocab.end() && mg != impl->vocab.end(),
                     origin, ": merge \"", left, " ", right, "\" uses a token missing from the vocab");
            impl->bpe->add_merge(l->second, r->second, mg->second, rank++);
        }
        impl->bpe->finalize();
        if (impl->ignore_merges)
            for (const auto& [token, id] : impl->vocab) impl->vocab_by_bytes.emplace(impl->bytes[id], id);

        // Added tokens. Ids follow Hugging Face's AddedVocabulary: a content already in the
        // vocabulary keeps that id; others get the next id past the model's vocabulary.
        int32_t max_added = -1;
        size_t num_renumbered = 0;
        for (const auto& t : root.value("added_tokens", json::array())) {
            AddedToken tok;
            tok.content = t.at("content").get<std::string>();
            tok.special = t.value("special", false);
            tok.lstrip = t.value("lstrip", false);
            tok.rstrip = t.value("rstrip", false);
            tok.single_word = t.value("single_word", false);
            tok.normalized = t.value("normalized", !tok.special);
            if (tok.content.empty() || impl->added_by_content.count(tok.content)) continue;
            DI_CHECK(is_valid_utf8(tok.content), origin, ": added token is not valid UTF-8");
            auto in_vocab = impl->vocab.find(tok.content);
            if (in_vocab != impl->vocab.end())
                tok.id = in_vocab->second;
            else
                tok.id = max_added >= model_vocab_size ? max_added + 1 : model_vocab_size;
            if (t.value("id", int64_t(tok.id)) != tok.id) ++num_renumbered;
            max_added = std::max(max_added, tok.id);
            grow(tok.id);
            impl->token_text[tok.id] = tok.content;
            impl->bytes[tok.id] = decoded_bytes(tok.content);
            impl->flags[tok.id] |= Impl::kKnown | Impl::kAdded | (tok.special ? Impl::kSpecial : 0);
            impl->added_by_content.emplace(tok.content, tok.id);
            impl->added.push_back(std::move(tok));
        }
        if (num_renumbered > 0)
            DI_LOG_WARN("{}: {} added tokens get ids other than those in the file (numbered as "
                        "Hugging Face tokenizers numbers them)", origin, num_renumbered);
        impl->added_vocab = std::make_unique<AddedVocabulary>(impl->added);
    } catch (const json::exception& e) {
        DI_THROW(origin, ": malformed tokenizer.json: ", e.what());
    }
    return Tokenizer(std::move(impl));
}

// ---- Encoding ---------------------------------------------------------------------------------

void Tokenizer::Impl::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
    thread_local std::vector<Span> pieces, scratch;
    pre_tokenizer->split(text, pieces, scratch);
    for (const Span& p : pieces) {
        std::string_view piece = text.substr(p.first, p.second - p.first);
        if (ignore_merges) {
            auto it = vocab_by_bytes.find(std::string(piece));
            if (it != vocab_by_bytes.end()) {
                out.push_back(it->second);
                continue;
            }
        }
        bpe->encode_piece(piece, out);
    }
}

void Tokenizer::Impl::encode(std::string_view text, std::vector<int32_t>& out) const {
    thread_local std::vector<TextRun> runs;
    added_vocab->split(text, runs);
    for (const TextRun& r : runs) {
        if (r.id >= 0)
            out.push_back(r.id);
        else
            encode_ordinary(text.substr(r.begin, r.end - r.begin), out);
    }
}

namespace {
// Runs `fn` on valid UTF-8: the input itself, or its sanitized copy.
template <typename Fn>
void with_valid_utf8(std::string_view text, Fn&& fn) {
    if (is_valid_utf8(text)) {
        fn(text);
    } else {
        std::string clean = sanitize_utf8(text);
        fn(std::string_view(clean));
    }
}
}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    with_valid_utf8(text, [&](std::string_view t) { impl_->encode(t, out); });
    return out;
}

std::vector<int32_t> Tokenizer::encode_ordinary(std::string_view text) const {
    std::vector<int32_t> out;
    encode_ordinary_append(text, out);
    return out;
}

void Tokenizer::encode_ordinary_append(std::string_view text, std::vector<int32_t>& out) const {
    with_valid_utf8(text, [&](std::string_view t) { impl_->encode_ordinary(t, out); });
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string> texts) const {
    std::vector<std::vector<int32_t>> out(texts.size());
    const auto n = static_cast<int64_t>(texts.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = encode(texts[size_t(i)]);
    return out;
}

// ---- Decoding and lookups ---------------------------------------------------------------------

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    IncrementalDecoder dec(*this, skip_special_tokens);
    std::string out;
    for (int32_t id : ids) out += dec.push(id);
    out += dec.finish();
    return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    auto a = impl_->added_by_content.find(std::string(token));
    if (a != impl_->added_by_content.end()) return a->second;
    auto v = impl_->vocab.find(std::string(token));
    if (v != impl_->vocab.end()) return v->second;
    return std::nullopt;
}

std::optional<int32_t> Tokenizer::added_token_id(std::string_view content) const {
    auto a = impl_->added_by_content.find(std::string(content));
    if (a == impl_->added_by_content.end()) return std::nullopt;
    return a->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->token_text.size()) return {};
    return impl_->token_text[size_t(id)];
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->bytes.size()) return {};
    return impl_->bytes[size_t(id)];
}

bool Tokenizer::is_added(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < impl_->flags.size() &&
           (impl_->flags[size_t(id)] & Impl::kAdded);
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < impl_->flags.size() &&
           (impl_->flags[size_t(id)] & Impl::kSpecial);
}

std::span<const AddedToken> Tokenizer::added_tokens() const { return impl_->added; }

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->token_text.size()); }

// ---- Incremental decoding ---------------------------------------------------------------------

namespace {
// Moves the complete characters at the front of `pending` to `out`; invalid bytes become
// U+FFFD right away; an unfinished character at the end stays in `pending`.
void drain_complete(std::string& pending, std::string& out) {
    const auto* p = reinterpret_cast<const unsigned char*>(pending.data());
    const size_t n = pending.size();
    size_t i = 0;
    while (i < n) {
        const size_t good = utf8::valid_prefix_length(pending.substr(i));
        out.append(pending, i, good);
        i += good;
        if (i >= n) break;
        auto st = utf8::step(p + i, n - i);
        if (st.kind == utf8::Step::kIncomplete) break;
        out.append(utf8::kReplacement);
        i += st.len;
    }
    pending.erase(0, i);
}
}  // namespace

std::string IncrementalDecoder::push(int32_t id) {
    std::string out;
    const auto& impl = tokenizer_.impl();
    if (id < 0 || static_cast<size_t>(id) >= impl.flags.size()) return out;
    const uint8_t flags = impl.flags[size_t(id)];
    if (!(flags & Tokenizer::Impl::kKnown)) return out;
    if (flags & Tokenizer::Impl::kAdded) {
        if (skip_special_tokens_ && (flags & Tokenizer::Impl::kSpecial)) return out;
        // An added token ends the current chunk and is decoded as a chunk of its own.
        utf8::append_sanitized(pending_, out);
        pending_.clear();
        utf8::append_sanitized(impl.bytes[size_t(id)], out);
        return out;
    }
    pending_ += impl.bytes[size_t(id)];
    drain_complete(pending_, out);
    return out;
}

std::string IncrementalDecoder::finish() {
    std::string out;
    utf8::append_sanitized(pending_, out);
    pending_.clear();
    return out;
}

}  // namespace deepinfer
