// SPDX-License-Identifier: Apache-2.0
// Test helper: safetensors writers.
#include "unit/safetensors_writer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace deepinfer::test {

void write_raw(const std::string& path, uint64_t header_len, const std::string& header, const std::string& data) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header_len >> (8 * i)) & 0xFF));
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

void write_safetensors(const std::string& path, const std::vector<TensorBytes>& tensors) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    std::string data;
    for (const TensorBytes& t : tensors) {
        uint64_t begin = data.size();
        data.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
        header[t.name] = {{"dtype", std::string(dtype_safetensors_name(t.dtype))},
                          {"shape", t.shape},
                          {"data_offsets", {begin, static_cast<uint64_t>(data.size())}}};
    }
    std::string h = header.dump();
    while (h.size() % 8 != 0) h.push_back(' ');
    write_raw(path, h.size(), h, data);
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

std::string temp_dir(const std::string& name) {
    auto base = std::filesystem::temp_directory_path() / ("deepinfer_test_" + std::to_string(::getpid()));
    auto dir = base / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir.string();
}

}  // namespace deepinfer::test
