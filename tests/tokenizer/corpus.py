# SPDX-License-Identifier: Apache-2.0
"""A deterministic, hostile text corpus for tokenizer comparisons (tests and benchmark).

Every script the issue names (CJK, kana, Hangul, Arabic, Devanagari, Cyrillic, ...), emoji with ZWJ
sequences and skin tones, combining marks, digit runs in several numeral systems, whitespace runs
with tabs and CR/LF, code, URLs, strings that contain added-token text, and very long words.

Characters assigned after Unicode 14.0 are included on purpose (new emoji, Kawi, Garay, ...):
PCRE2's tables stop at 14.0 while Hugging Face's Oniguruma has 16.0, and deepinfer widens its regex
classes with the newer code points (src/tokenizer/unicode_compat.h) so both split them alike.
"""
import random


# Code point ranges per script (inclusive).
SCRIPTS = {
    "cjk": [(0x4E00, 0x9FA5)],
    "cjk_outside_class": [(0x9FA6, 0x9FFF), (0x3400, 0x4DBF), (0xF900, 0xFAFF), (0x20000, 0x2A6DF)],
    "hiragana": [(0x3041, 0x309F)],
    "katakana": [(0x30A0, 0x30FF), (0xFF66, 0xFF9F), (0x31F0, 0x31FF)],
    "hangul": [(0xAC00, 0xD7A3), (0x1100, 0x11FF), (0x3130, 0x318F)],
    "arabic": [(0x0600, 0x06FF), (0x0750, 0x077F), (0xFB50, 0xFDFF)],
    "devanagari": [(0x0900, 0x097F)],
    "cyrillic": [(0x0400, 0x04FF), (0x0500, 0x052F)],
    "greek": [(0x0370, 0x03FF), (0x1F00, 0x1FFF)],
    "hebrew": [(0x0590, 0x05FF)],
    "thai": [(0x0E00, 0x0E7F)],
    "latin": [(0x0041, 0x005A), (0x0061, 0x007A), (0x00C0, 0x024F), (0x1E00, 0x1EFF)],
    "combining": [(0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x20D0, 0x20FF)],
    "math_alnum": [(0x1D400, 0x1D7FF)],
    "symbols": [(0x2000, 0x2BFF), (0x3000, 0x303F), (0xFF01, 0xFF65)],
    "emoji": [(0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF)],
    "controls": [(0x0000, 0x001F), (0x007F, 0x009F)],
    "private_use": [(0xE000, 0xE0FF)],
    # Assigned after Unicode 14.0: Kawi (15.0), Garay and Todhri (16.0), new symbols and emoji.
    "newer": [(0x11F00, 0x11F59), (0x10D40, 0x10D8F), (0x105C0, 0x105F3), (0x1FA70, 0x1FAFF), (0x2427, 0x2429),
              (0x1CC00, 0x1CCF9)],
}

DIGIT_SETS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９",
              "²³¹¼½¾⁰⁴⁵", "ⅠⅡⅢⅣⅤⅫↀ", "①②③⑩⑳", "𝟎𝟏𝟐𝟑", "〇一二三"]
WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\t\t", "\u00a0", "\u3000",
              "\u2028", "\u2029", "\u200b", "\u000b", "\u000c", "\u0085", "\u2003", "\u202f", "\ufeff"]
EMOJI = ["👨‍👩‍👧‍👦", "👩🏽‍💻", "🧑🏿‍🤝‍🧑🏻", "👍🏽", "👋🏻", "🇺🇸", "🇯🇵🇰🇷", "1️⃣", "#️⃣", "❤️", "🏳️‍🌈",
         "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "😀", "🤖", "✊🏿", "🫠", "👁️‍🗨️", "🧔‍♂️", "🐈‍⬛", "🫨", "🩷", "🐦‍🔥", "🫩", "🫆", "🪾"]
COMBINING = ["e\u0301", "a\u0308\u0304", "n\u0303", "Z\u0351\u0362\u036b\u0300\u0301", "ก\u0e34\u0e48",
             "क\u094d\u0937", "ब\u093f\u0902", "ل\u064e\u0651", "각\u0301", "\u0301\u0301start"]
CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "int main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v[0] + argc;\n}\n",
    '{"key": [1, 2.5e-3, null, true], "nested": {"a": "b\\n"}}',
    "<div class=\"x\">&nbsp;<a href='/p?q=1&r=2'>link</a></div>",
    "for i in $(seq 1 10); do echo \"$i\" | sed 's/a/b/g'; done",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%o%';",
    "re.compile(r'(?P<name>[A-Za-z_]\\w*)\\s*=\\s*(\\d+)')",
    "    if (a != b && c <= d || !e) { x->y = z::w<T>(); }\r\n",
    "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", vec![1u8; 4]); Ok(()) }",
    "const f = async (a, b = {}) => { await g?.(a ?? b); };",
    "```python\nprint('hi')\n```\n",
    "$$\\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}$$",
]
URLS = ["https://example.com/path/to/page?query=1&x=%20y#frag", "http://127.0.0.1:8080/api/v1",
        "ftp://files.example.org/pub/file-1.2.3.tar.gz", "mailto:someone@example.co.uk",
        "https://zh.wikipedia.org/wiki/中文", "file:///C:/Users/me/Documents/a%20b.txt",
        "user.name+tag@sub.domain.io", "www.example.com/~user/index.html"]
SPECIAL_TEXT = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>",
                "</think>", "｜DSML｜", "<｜DSML｜tool_calls>", "</｜DSML｜invoke>", "<｜latest_reminder｜>",
                "<｜System｜>", "<｜image｜>", "<｜▁pad▁｜>", "<｜User", "User｜>", "<think", "</think>>",
                "<<think>>", "<｜tool▁calls▁begin｜>", "<|EOT|>", "<｜place▁holder▁no▁5｜>", "<dsml:",
                "<｜fim▁hole｜>", "<|place_holder_mm_span_0021|>", "<｜/table>｜", "｜", "▁", "<｜｜>"]


def _chars(ranges):
    out = []
    for lo, hi in ranges:
        for cp in range(lo, hi + 1):
            c = chr(cp)
            if 0xD800 <= cp <= 0xDFFF:
                continue
            out.append(c)
    return out


def _alphabet():
    # Unassigned code points stay in: both tokenizers must agree on them too.
    return {name: _chars(ranges) for name, ranges in SCRIPTS.items()}


ALPHABET = _alphabet()


def random_word(rng, script, lo=1, hi=12):
    chars = ALPHABET[script]
    return "".join(rng.choice(chars) for _ in range(rng.randint(lo, hi)))


def random_mixed(rng, n):
    """n random pieces of every kind glued together without separators."""
    parts = []
    kinds = list(SCRIPTS) + ["digits", "ws", "emoji", "combining", "special", "ascii_punct"]
    for _ in range(n):
        k = rng.choice(kinds)
        if k == "digits":
            parts.append("".join(rng.choice(rng.choice(DIGIT_SETS)) for _ in range(rng.randint(1, 9))))
        elif k == "ws":
            parts.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 4))))
        elif k == "emoji":
            parts.append(rng.choice(EMOJI))
        elif k == "combining":
            parts.append(rng.choice(COMBINING))
        elif k == "special":
            parts.append(rng.choice(SPECIAL_TEXT))
        elif k == "ascii_punct":
            parts.append("".join(rng.choice("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") for _ in range(rng.randint(1, 5))))
        else:
            parts.append(random_word(rng, k, 1, 8))
    return "".join(parts)


def sentence(rng, script, words=8):
    sep = {"cjk": "", "hiragana": "", "katakana": "", "thai": ""}.get(script, " ")
    text = sep.join(random_word(rng, script, 1, 7) for _ in range(words))
    return text + rng.choice([".", "。", "!", "?", "؟", "।", "", "\n"])


def build_corpus(seed=1234, num_random=2500):
    """The list of documents; deterministic for a given seed."""
    rng = random.Random(seed)
    docs = []
    # Fixed, readable cases first.
    docs += [
        "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
        "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>",
        "", " ", "\n", "\r\n", "a", "1", "12", "123", "1234", "12345678901234567890",
        "The quick brown fox jumps over the lazy dog.",
        "Привет, мир! Как дела?", "こんにちは、世界。カタカナとひらがな。", "안녕하세요 세계",
        "مرحبا بالعالم، كيف حالك؟", "नमस्ते दुनिया, आप कैसे हैं?", "สวัสดีชาวโลก", "שלום עולם",
        "Ελληνικά κείμενα με τόνους", "Ünïcödé façade naïve café résumé", "e\u0301\u0301\u0301",
        "    indented\n\tTabbed\r\n\r\n\n\n   trailing   ", "a\u00a0b\u3000c\u2028d\u2029e",
        "don't I'll we've they're she'd it's", "\u0000\u0001\u001f\u007f\u0080\u009f",
    ]
    docs += CODE + URLS + SPECIAL_TEXT + EMOJI + COMBINING
    docs += [" ".join(SPECIAL_TEXT), "".join(SPECIAL_TEXT), "x<｜User｜>y", " <｜User｜> ", "\n</think>\n",
             "word<think>word</think>word", "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">"]
    # Very long words and runs.
    docs += ["a" * 5000, "ab" * 3000, "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(4000)),
             "中" * 3000, random_word(rng, "cjk", 2000, 2000), random_word(rng, "hangul", 1500, 1500),
             "7" * 4001, "".join(rng.choice("0123456789") for _ in range(3000)), " " * 3000,
             "\t" * 1000, "\n" * 1000, "\r\n" * 500, " \t\n" * 400, "!" * 2000, "=-" * 1000,
             "😀" * 500, "👨‍👩‍👧‍👦" * 100, "e\u0301" * 1000, random_word(rng, "arabic", 1500, 1500),
             random_word(rng, "latin", 3000, 3000), "x" * 200 + " " + "y" * 200,
             "supercalifragilisticexpialidocious" * 60, "ｘ" * 1000]
    # Sentences in every script.
    for script in SCRIPTS:
        for _ in range(20):
            docs.append(" ".join(sentence(rng, script, rng.randint(2, 12)) for _ in range(rng.randint(1, 4))))
    # Digits in context.
    for _ in range(100):
        ds = rng.choice(DIGIT_SETS)
        num = "".join(rng.choice(ds) for _ in range(rng.randint(1, 15)))
        docs.append(rng.choice(["Price: $%s.99", "%s", "v%s.2", "x=%s;", "第%s章", "%s年", "-%s-"]) % num)
    # Random mixtures, short and long.
    for i in range(num_random):
        docs.append(random_mixed(rng, rng.randint(1, 40 if i % 10 else 200)))
    # Code and prose mixed with added-token text.
    for _ in range(200):
        pieces = [rng.choice(CODE + URLS + SPECIAL_TEXT + EMOJI) for _ in range(rng.randint(2, 6))]
        glue = rng.choice(["", " ", "\n", "\t", "  "])
        docs.append(glue.join(pieces))
    return docs
