// SPDX-License-Identifier: Apache-2.0
// safetensors: mmap, header parsing and validation. The header parser is the checkpoint's trust
// boundary; every rule it enforces has a case in tests/unit/safetensors_test.cpp and
// tests/python/test_malformed_checkpoints.py.
#include "deepinfer/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "deepinfer/check.h"

namespace deepinfer {
namespace {

using nlohmann::json;

std::string quote_name(std::string_view s) {
    std::string out = "'";
    for (char ch : s.substr(0, 120)) {
        unsigned char u = static_cast<unsigned char>(ch);
        if (u < 0x20 || u == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", u);
            out += buf;
        } else {
            out += ch;
        }
    }
    if (s.size() > 120) out += "...";
    return out + "'";
}

uint64_t read_u64_le(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

uint64_t as_u64(const json& v, std::string_view file, std::string_view tensor, std::string_view field) {
    DI_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), file, ": tensor ",
             quote_name(tensor), ": ", field, " must hold non-negative integers, got ", v.dump());
    return v.get<uint64_t>();
}

SafetensorsTensorInfo parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                                  std::string_view file) {
    DI_CHECK(entry.is_object(), file, ": tensor ", quote_name(name), ": entry must be an object");
    for (auto it = entry.begin(); it != entry.end(); ++it) {
        DI_CHECK(it.key() == "dtype" || it.key() == "shape" || it.key() == "data_offsets", file, ": tensor ",
                 quote_name(name), ": unexpected field ", quote_name(it.key()));
    }
    DI_CHECK(entry.contains("dtype") && entry["dtype"].is_string(), file, ": tensor ", quote_name(name),
             ": missing or non-string 'dtype'");
    DI_CHECK(entry.contains("shape") && entry["shape"].is_array(), file, ": tensor ", quote_name(name),
             ": missing or non-list 'shape'");
    DI_CHECK(entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                 entry["data_offsets"].size() == 2,
             file, ": tensor ", quote_name(name), ": 'data_offsets' must be a list of two integers");

    SafetensorsTensorInfo info;
    info.name = name;
    const std::string dtype = entry["dtype"].get<std::string>();
    auto dt = dtype_from_safetensors(dtype);
    DI_CHECK(dt.has_value(), file, ": tensor ", quote_name(name), ": unknown dtype ", quote_name(dtype));
    info.dtype = *dt;

    const json& shape = entry["shape"];
    DI_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), file, ": tensor ", quote_name(name), ": rank ",
             shape.size(), " exceeds the maximum of ", kMaxDims);
    int64_t dims[kMaxDims] = {};
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t i = 0; i < shape.size(); ++i) {
        uint64_t d = as_u64(shape[i], file, name, "shape");
        DI_CHECK(d <= static_cast<uint64_t>(kMaxSafetensorsDim), file, ": tensor ", quote_name(name), ": dimension ", i,
                 " = ", d, " is absurdly large");
        dims[i] = static_cast<int64_t>(d);
        if (d != 0 && numel > UINT64_MAX / d) overflow = true;
        numel = overflow ? 0 : numel * d;
    }
    DI_CHECK(!overflow, file, ": tensor ", quote_name(name), ": element count overflows 64 bits");
    info.shape = Shape::from(dims, static_cast<int>(shape.size()));

    info.begin = as_u64(entry["data_offsets"][0], file, name, "data_offsets");
    info.end = as_u64(entry["data_offsets"][1], file, name, "data_offsets");
    DI_CHECK(info.begin <= info.end, file, ": tensor ", quote_name(name), ": data_offsets [", info.begin, ", ",
             info.end, "] are reversed");
    DI_CHECK(info.end <= data_size, file, ": tensor ", quote_name(name), ": data_offsets [", info.begin, ", ",
             info.end, "] end past the data section of ", data_size, " bytes (truncated file?)");
    auto bytes = dtype_storage_bytes(info.dtype, numel);
    DI_CHECK(bytes.has_value(), file, ": tensor ", quote_name(name), ": ", numel, " elements of ", dtype,
             " do not fill whole bytes or overflow");
    DI_CHECK(*bytes == info.end - info.begin, file, ": tensor ", quote_name(name), ": shape ", info.shape.str(),
             " of ", dtype, " needs ", *bytes, " bytes but data_offsets span ", info.end - info.begin);
    return info;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view header_json, uint64_t data_size,
                                           std::string_view file) {
    DI_CHECK(header_json.size() <= kMaxSafetensorsHeaderBytes, file, ": header of ", header_json.size(),
             " bytes exceeds the ", kMaxSafetensorsHeaderBytes, "-byte limit");
    // Keys of the top-level object, to reject duplicates (JSON parsers keep the last silently).
    std::set<std::string> top_keys;
    std::string duplicate;
    json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::key && depth == 1) {
            std::string key = parsed.get<std::string>();
            if (!top_keys.insert(key).second && duplicate.empty()) duplicate = key;
        }
        if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
            // Headers are two levels deep; a deeply nested document is malformed (and could exhaust the stack).
            if (depth > 4) throw std::runtime_error("nesting deeper than 4 levels");
        }
        return true;
    };
    json root;
    try {
        root = json::parse(header_json.begin(), header_json.end(), on_event, /*allow_exceptions=*/true);
    } catch (const json::exception& e) {
        DI_THROW(file, ": header is not valid JSON: ", e.what());
    } catch (const std::runtime_error& e) {
        DI_THROW(file, ": header is malformed: ", e.what());
    }
    DI_CHECK(duplicate.empty(), file, ": header lists ", quote_name(duplicate), " twice");
    DI_CHECK(root.is_object(), file, ": header must be a JSON object");

    SafetensorsHeader header;
    for (auto it = root.begin(); it != root.end(); ++it) {
        if (it.key() == "__metadata__") {
            DI_CHECK(it.value().is_object(), file, ": __metadata__ must be an object of strings");
            for (auto m = it.value().begin(); m != it.value().end(); ++m) {
                DI_CHECK(m.value().is_string(), file, ": __metadata__ value of ", quote_name(m.key()),
                         " must be a string");
                header.metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        DI_CHECK(!it.key().empty(), file, ": a tensor has an empty name");
        header.tensors.push_back(parse_entry(it.key(), it.value(), data_size, file));
    }

    // Ranges must not overlap and must tile the data section exactly.
    std::vector<const SafetensorsTensorInfo*> order;
    for (const auto& t : header.tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t cursor = 0;
    const SafetensorsTensorInfo* prev = nullptr;
    for (const SafetensorsTensorInfo* t : order) {
        if (t->begin == t->end) continue;  // empty tensors occupy no bytes
        DI_CHECK(t->begin >= cursor, file, ": tensors ", quote_name(prev ? prev->name : ""), " and ", quote_name(t->name),
                 " overlap (bytes [", t->begin, ", ", std::min(cursor, t->end), "))");
        DI_CHECK(t->begin == cursor, file, ": bytes [", cursor, ", ", t->begin,
                 ") of the data section belong to no tensor (hole before ", quote_name(t->name), ")");
        cursor = t->end;
        prev = t;
    }
    DI_CHECK(cursor == data_size, file, ": the data section has ", data_size - cursor,
             " trailing bytes that belong to no tensor");
    return header;
}

// ---- MappedFile -------------------------------------------------------------------------------

MappedFile::MappedFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    DI_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        DI_THROW(path, ": cannot stat: ", std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        DI_THROW(path, ": not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        int err = errno;
        ::close(fd);
        DI_CHECK(p != MAP_FAILED, path, ": cannot mmap ", size_, " bytes: ", std::strerror(err));
        data_ = static_cast<const uint8_t*>(p);
    } else {
        ::close(fd);
    }
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

// ---- SafetensorsFile --------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), map_(path) {
    DI_CHECK(map_.size() >= 8, path, ": file is ", map_.size(),
             " bytes, too short for the 8-byte header length (truncated or not a safetensors file)");
    uint64_t header_len = read_u64_le(map_.data());
    DI_CHECK(header_len <= map_.size() - 8, path, ": header length ", header_len, " runs past the end of the ",
             map_.size(), "-byte file (truncated or not a safetensors file)");
    DI_CHECK(header_len <= kMaxSafetensorsHeaderBytes, path, ": header length ", header_len,
             " exceeds the ", kMaxSafetensorsHeaderBytes, "-byte limit");
    DI_CHECK(header_len >= 2, path, ": header length ", header_len, " is too small for a JSON object");
    data_offset_ = 8 + header_len;
    std::string_view json_text(reinterpret_cast<const char*>(map_.data() + 8), header_len);
    DI_CHECK(json_text.front() == '{', path, ": header does not start with '{' (not a safetensors file?)");
    header_ = parse_safetensors_header(json_text, map_.size() - data_offset_, path);
    for (size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
}

const SafetensorsTensorInfo* SafetensorsFile::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

TensorView SafetensorsFile::view(const SafetensorsTensorInfo& info) const {
    DI_ICHECK(data_offset_ + info.end <= map_.size());
    // NOTE: the mapping is PROT_READ; TensorView carries a mutable pointer for uniformity only.
    auto* p = const_cast<uint8_t*>(map_.data() + data_offset_ + info.begin);
    return TensorView(p, info.dtype, info.shape);
}

}  // namespace deepinfer
