// SPDX-License-Identifier: Apache-2.0
// The safetensors trust boundary: a valid file reads back exactly; every malformed file throws a
// deepinfer::Error that names the file and the problem (no crash, no out-of-bounds read; the
// suite also runs under ASan in the cpu-asan preset).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "deepinfer/check.h"
#include "deepinfer/safetensors.h"
#include "unit/safetensors_writer.h"

namespace deepinfer {
namespace {

using test::temp_dir;
using test::write_raw;

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t b,
                  uint64_t e) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
}

// Expects opening `path` to throw an Error whose message contains the file name and `needle`.
void expect_rejected(const std::string& path, const std::string& needle) {
    try {
        SafetensorsFile f(path);
        FAIL() << "accepted a malformed file; expected an error containing '" << needle << "'";
    } catch (const Error& e) {
        std::string msg = e.message();
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nexpected: " << needle;
    }
}

class SafetensorsTest : public ::testing::Test {
protected:
    std::string dir = temp_dir("safetensors");
    std::string file(const std::string& name) { return dir + "/" + name; }
    void write(const std::string& path, const std::string& header, const std::string& data) {
        write_raw(path, header.size(), header, data);
    }
};

TEST_F(SafetensorsTest, ValidFileReadsBack) {
    std::vector<uint8_t> a(2 * 3 * 4), b(5 * 2);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(200 - i);
    test::write_safetensors(file("ok.safetensors"),
                            {{"a", DType::kF32, {2, 3}, a}, {"b.weight", DType::kBF16, {5}, b}});
    SafetensorsFile f(file("ok.safetensors"));
    ASSERT_EQ(f.tensors().size(), 2u);
    const SafetensorsTensorInfo* ta = f.find("a");
    ASSERT_NE(ta, nullptr);
    EXPECT_EQ(ta->dtype, DType::kF32);
    EXPECT_EQ(ta->shape, Shape({2, 3}));
    TensorView va = f.view(*ta);
    EXPECT_EQ(std::memcmp(va.data(), a.data(), a.size()), 0);
    TensorView vb = f.view(*f.find("b.weight"));
    EXPECT_EQ(vb.dtype(), DType::kBF16);
    EXPECT_EQ(std::memcmp(vb.data(), b.data(), b.size()), 0);
    EXPECT_EQ(f.find("missing"), nullptr);
}

TEST_F(SafetensorsTest, MetadataAndEmptyTensors) {
    std::string h = "{\"__metadata__\":{\"format\":\"pt\"}," + entry("e", "F32", "[0,4]", 0, 0) + "," +
                    entry("x", "U8", "[3]", 0, 3) + "}";
    write(file("meta.safetensors"), h, "abc");
    SafetensorsFile f(file("meta.safetensors"));
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.find("e")->shape.numel(), 0);
}

TEST_F(SafetensorsTest, EmptyFile) {
    write_raw(file("empty.safetensors"), 0, "", "");
    // write_raw always writes the 8-byte length; make a truly empty file too.
    test::write_text(file("zero.safetensors"), "");
    expect_rejected(file("zero.safetensors"), "too short");
    expect_rejected(file("empty.safetensors"), "too small");
}

TEST_F(SafetensorsTest, TruncatedData) {
    std::string h = "{" + entry("w", "F32", "[4,4]", 0, 64) + "}";
    write(file("trunc.safetensors"), h, std::string(40, 'x'));
    expect_rejected(file("trunc.safetensors"), "past the data section");
}

TEST_F(SafetensorsTest, TruncatedHeader) {
    test::write_text(file("short.safetensors"), std::string("\x10\x00\x00", 3));
    expect_rejected(file("short.safetensors"), "too short");
}

TEST_F(SafetensorsTest, HeaderLengthPastEof) {
    write_raw(file("len.safetensors"), 1000, "{}", "");
    expect_rejected(file("len.safetensors"), "runs past the end");
    write_raw(file("huge.safetensors"), UINT64_MAX, "{}", "");
    expect_rejected(file("huge.safetensors"), "runs past the end");
}

TEST_F(SafetensorsTest, OverlappingRanges) {
    std::string h = "{" + entry("a", "U8", "[8]", 0, 8) + "," + entry("b", "U8", "[8]", 4, 12) + "}";
    write(file("overlap.safetensors"), h, std::string(12, 'x'));
    expect_rejected(file("overlap.safetensors"), "overlap");
    std::string same = "{" + entry("a", "U8", "[8]", 0, 8) + "," + entry("b", "U8", "[8]", 0, 8) + "}";
    write(file("alias.safetensors"), same, std::string(8, 'x'));
    expect_rejected(file("alias.safetensors"), "overlap");
}

TEST_F(SafetensorsTest, HolesAndTrailingBytes) {
    std::string h = "{" + entry("a", "U8", "[4]", 0, 4) + "," + entry("b", "U8", "[4]", 8, 12) + "}";
    write(file("hole.safetensors"), h, std::string(12, 'x'));
    expect_rejected(file("hole.safetensors"), "belong to no tensor");
    std::string t = "{" + entry("a", "U8", "[4]", 0, 4) + "}";
    write(file("trailing.safetensors"), t, std::string(9, 'x'));
    expect_rejected(file("trailing.safetensors"), "trailing bytes");
}

TEST_F(SafetensorsTest, ShapeSizeMismatch) {
    std::string h = "{" + entry("w", "BF16", "[3,3]", 0, 16) + "}";
    write(file("mismatch.safetensors"), h, std::string(16, 'x'));
    expect_rejected(file("mismatch.safetensors"), "needs 18 bytes but data_offsets span 16");
}

TEST_F(SafetensorsTest, UnknownDtype) {
    std::string h = "{" + entry("w", "F128", "[2]", 0, 32) + "}";
    write(file("dtype.safetensors"), h, std::string(32, 'x'));
    expect_rejected(file("dtype.safetensors"), "unknown dtype 'F128'");
}

TEST_F(SafetensorsTest, AbsurdSizes) {
    std::string h = "{" + entry("w", "F32", "[1099511627776,1099511627776,1099511627776]", 0, 8) + "}";
    write(file("absurd.safetensors"), h, std::string(8, 'x'));
    expect_rejected(file("absurd.safetensors"), "overflows");
    std::string big = "{" + entry("w", "F32", "[18446744073709551615]", 0, 8) + "}";
    write(file("bigdim.safetensors"), big, std::string(8, 'x'));
    expect_rejected(file("bigdim.safetensors"), "absurdly large");
    std::string off = "{" + entry("w", "U8", "[4]", 0, 18446744073709551615ull) + "}";
    write(file("bigoff.safetensors"), off, std::string(4, 'x'));
    expect_rejected(file("bigoff.safetensors"), "past the data section");
    std::string rank = "{" + entry("w", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) + "}";
    write(file("rank.safetensors"), rank, "x");
    expect_rejected(file("rank.safetensors"), "rank 9");
}

TEST_F(SafetensorsTest, NegativeAndNonIntegerFields) {
    write(file("neg.safetensors"), "{" + entry("w", "U8", "[-4]", 0, 4) + "}", "xxxx");
    expect_rejected(file("neg.safetensors"), "non-negative integers");
    write(file("float.safetensors"), "{" + entry("w", "U8", "[4.5]", 0, 4) + "}", "xxxx");
    expect_rejected(file("float.safetensors"), "non-negative integers");
    write(file("rev.safetensors"), "{" + entry("w", "U8", "[0]", 4, 0) + "}", "xxxx");
    expect_rejected(file("rev.safetensors"), "reversed");
}

TEST_F(SafetensorsTest, InvalidUtf8InHeader) {
    std::string h = "{" + entry(std::string("w\xff\xfe"), "U8", "[4]", 0, 4) + "}";
    write(file("utf8.safetensors"), h, "xxxx");
    expect_rejected(file("utf8.safetensors"), "not valid JSON");
}

TEST_F(SafetensorsTest, InvalidJson) {
    write(file("json.safetensors"), "{\"w\": {\"dtype\": \"U8\", ", "xxxx");
    expect_rejected(file("json.safetensors"), "not valid JSON");
    write(file("array.safetensors"), "[1, 2, 3]   ", "");
    expect_rejected(file("array.safetensors"), "does not start with '{'");
    write(file("nul.safetensors"), std::string("{\"a\0\":1}", 8), "");
    expect_rejected(file("nul.safetensors"), "not valid JSON");
}

TEST_F(SafetensorsTest, DeepNesting) {
    std::string h = "{\"__metadata__\":" + std::string(5000, '[') + std::string(5000, ']') + "}";
    write(file("deep.safetensors"), h, "");
    expect_rejected(file("deep.safetensors"), "nesting");
}

TEST_F(SafetensorsTest, DuplicateNames) {
    std::string h = "{" + entry("w", "U8", "[4]", 0, 4) + "," + entry("w", "U8", "[4]", 4, 8) + "}";
    write(file("dup.safetensors"), h, std::string(8, 'x'));
    expect_rejected(file("dup.safetensors"), "'w' twice");
}

TEST_F(SafetensorsTest, MalformedEntries) {
    write(file("extra.safetensors"),
          "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"evil\":1}}", "x");
    expect_rejected(file("extra.safetensors"), "unexpected field 'evil'");
    write(file("noshape.safetensors"), "{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", "x");
    expect_rejected(file("noshape.safetensors"), "'shape'");
    write(file("offsets3.safetensors"), "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", "x");
    expect_rejected(file("offsets3.safetensors"), "data_offsets");
    write(file("meta.safetensors"), "{\"__metadata__\":{\"k\":5}}", "");
    expect_rejected(file("meta.safetensors"), "must be a string");
    write(file("odd_fp4.safetensors"), "{" + entry("w", "F4", "[3]", 0, 2) + "}", "xx");
    expect_rejected(file("odd_fp4.safetensors"), "whole bytes");
}

TEST_F(SafetensorsTest, NotAFile) { expect_rejected(dir, "not a regular file"); }

TEST(SafetensorsHeader, OversizedHeaderIsRejectedBeforeParsing) {
    std::string big(kMaxSafetensorsHeaderBytes + 1, ' ');
    try {
        parse_safetensors_header(big, 0, "mem");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos);
    }
}

}  // namespace
}  // namespace deepinfer
