"""Python bindings (import kvshrink) against the kvshrink CLI of the same build, on the in-repo
testbed model and eval/examples/needle_context.txt. Run by ctest (python.bindings) with
PYTHONPATH=<build>/python, KVS_SOURCE_DIR, KVS_BINARY_DIR and KVS_CLI set."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import kvshrink

SRC = os.environ.get("KVS_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KVS_BINARY_DIR", os.path.join(SRC, "build"))
CLI = os.environ.get("KVS_CLI", os.path.join(BIN, "tools", "kvshrink"))
MODEL = os.path.join(SRC, "testbed", "models", "v7s1", "model-f16.gguf")
CONTEXT = os.path.join(SRC, "eval", "examples", "needle_context.txt")
TEMPLATE = "\n{question}"
QUESTION = ("What is the special magic number for quiet-harbor mentioned in the provided text? "
            "The special magic number for quiet-harbor mentioned in the provided text is")


@pytest.fixture(scope="module")
def model():
    return kvshrink.Model(MODEL, threads=1)


@pytest.fixture(scope="module")
def context_text():
    with open(CONTEXT, encoding="utf-8") as f:
        return f.read()


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


def read_kvc_positions(path):
    """Positions of every (layer, KV head) in a .kvc file, read from its bytes (format in
    src/kvcache/cache_file.h)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"KVSC"
    _version, header_len = struct.unpack_from("<IQ", data, 4)
    off = 16
    header = json.loads(data[off:off + header_len])
    off += header_len
    # f32 / f16 values, or GGUF blocks of 32 values: Q8_0 34 bytes (f16 scale + 32 int8), Q4_0 18.
    per_block = {"f32": 128, "f16": 64, "q8_0": 34, "q4_0": 18}[header["dtype"]]
    row_bytes = header["head_dim"] // 32 * per_block if header["head_dim"] % 32 == 0 else \
        header["head_dim"] * (4 if header["dtype"] == "f32" else 2)
    heads = {}
    for layer in range(header["n_layer"]):
        for kvh in range(header["n_head_kv"]):
            (n,) = struct.unpack_from("<I", data, off)
            off += 4
            heads[(layer, kvh)] = np.frombuffer(data, dtype="<i4", count=n, offset=off).copy()
            off += 4 * n
            has_mass = data[off]
            off += 1 + (4 * n if has_mass else 0)
            off += 2 * n * row_bytes  # K rows, V rows
    assert off + 8 == len(data)
    return header, heads


def cli(*args):
    r = subprocess.run([CLI, *args], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def cli_answer(kvc_path):
    out = cli("ask", "-m", MODEL, kvc_path, "-n", "8", "-t", "1", QUESTION)
    # "Q: <question>\nA: <answer>\n"; the answer may hold newlines itself.
    assert out.startswith("Q: ") and out.endswith("\n")
    return out[out.index("\nA: ") + len("\nA: "):-1]


def test_presses_listed():
    names = [p.name for p in kvshrink.presses()]
    assert "full" in names and "snapkv" in names and "keydiff" in names
    snap = [p for p in kvshrink.presses() if p.name == "snapkv"][0]
    assert snap.description and all(p.name for p in snap.params)
    assert kvshrink.allocators()
    assert kvshrink.__version__.count(".") == 2


@pytest.mark.parametrize("press,keep", [("snapkv", 0.25), ("keydiff", 0.4)])
def test_answer_equals_cli(model, context_text, tmp, press, keep):
    kvc = str(tmp / f"{press}_cli.kvc")
    cli("compress", "-m", MODEL, "-t", "1", "--press", press, "--keep", str(keep), "--context", CONTEXT,
        "--question-template", TEMPLATE, "-o", kvc)
    ctx = model.compress(context_text, press=press, keep=keep, question_template=TEMPLATE)
    assert ctx.ask(QUESTION, max_new_tokens=8) == cli_answer(kvc)
    # The same kept positions as the CLI's file.
    _, heads = read_kvc_positions(kvc)
    for (layer, head), pos in heads.items():
        np.testing.assert_array_equal(ctx.kept_positions(layer, head), pos)


def test_kv_type_defaults_to_f16(model, context_text, tmp):
    """F16 KV by default (issue 14); kv_type="f32" doubles the bytes; an F32 file loads into a default model."""
    ctx16 = model.compress(context_text, press="keydiff", keep=0.4, question_template=TEMPLATE)
    f32 = kvshrink.Model(MODEL, threads=1, kv_type="f32")
    ctx32 = f32.compress(context_text, press="keydiff", keep=0.4, question_template=TEMPLATE)
    assert ctx32.full_kv_bytes == 2 * ctx16.full_kv_bytes
    path = tmp / "f32.kvc"
    ctx32.save(path)
    header, _ = read_kvc_positions(path)
    assert header["dtype"] == "f32"
    ctx16.save(tmp / "f16.kvc")
    assert read_kvc_positions(tmp / "f16.kvc")[0]["dtype"] == "f16"
    loaded = kvshrink.load(str(path), model)
    assert 2 * loaded.kv_bytes == ctx32.kv_bytes
    assert loaded.ask(QUESTION, max_new_tokens=8).startswith(" 4071589")


@pytest.mark.parametrize("kv_type,block_bytes", [("q8_0", 34), ("q4_0", 18)])
def test_quantized_kv_pages(model, context_text, tmp, kv_type, block_bytes):
    """Issue 25: GGUF-block KV pages (head_dim 32: one block per row vs 64 bytes of f16) combined with
    eviction answer the needle; the .kvc records the type and loads into an f16 model (converted)."""
    ctx16 = model.compress(context_text, press="keydiff", keep=0.4, question_template=TEMPLATE)
    q = kvshrink.Model(MODEL, threads=1, kv_type=kv_type)
    ctx = q.compress(context_text, press="keydiff", keep=0.4, question_template=TEMPLATE)
    assert ctx.full_kv_bytes * 64 == ctx16.full_kv_bytes * block_bytes
    assert ctx.kv_bytes * 64 == ctx16.kv_bytes * block_bytes
    assert ctx.ask(QUESTION, max_new_tokens=8).startswith(" 4071589")
    path = tmp / f"{kv_type}.kvc"
    ctx.save(path)
    header, heads = read_kvc_positions(path)
    assert header["dtype"] == kv_type
    loaded = kvshrink.load(str(path), model)  # into the f16 model: dequantized
    assert loaded.kv_bytes == ctx16.kv_bytes
    assert loaded.ask(QUESTION, max_new_tokens=8).startswith(" 4071589")
    with pytest.raises(Exception, match="q8_0, q4_0"):
        kvshrink.Model(MODEL, threads=1, kv_type="q5_0")


def test_keydiff_finds_the_needle(model, context_text):
    ctx = model.compress(context_text, press="keydiff", keep=0.4, question_template=TEMPLATE)
    assert ctx.ask(QUESTION, max_new_tokens=8).startswith(" 4071589")
    assert 0.38 < ctx.keep_measured < 0.42
    assert ctx.kv_bytes < ctx.full_kv_bytes


def test_kept_positions_equal_the_kvc(model, context_text, tmp):
    ctx = model.compress(context_text, press="snapkv", keep=0.25, question_template=TEMPLATE)
    path = tmp / "ctx.kvc"
    ctx.save(path)  # os.PathLike accepted
    header, heads = read_kvc_positions(path)
    assert header["press"] == "snapkv" and header["keep"] == 0.25
    assert len(heads) == ctx.n_layer * ctx.n_head_kv
    for (layer, head), pos in heads.items():
        kept = ctx.kept_positions(layer, head)
        assert kept.dtype == np.int32
        np.testing.assert_array_equal(kept, pos)
    # Loaded back (both spellings): same positions, same answer, and the CLI reads the file.
    loaded = kvshrink.load(str(path), model)
    again = model.load(path)
    for layer in range(ctx.n_layer):
        for head in range(ctx.n_head_kv):
            np.testing.assert_array_equal(loaded.kept_positions(layer, head), ctx.kept_positions(layer, head))
    answer = ctx.ask(QUESTION, max_new_tokens=8)
    assert loaded.ask(QUESTION, max_new_tokens=8) == answer
    assert again.ask(QUESTION, max_new_tokens=8) == answer
    assert cli_answer(str(path)) == answer
    assert loaded.options["press"] == "snapkv" and loaded.options["question_template"] == TEMPLATE


def test_press_options_and_scores(model, context_text):
    base = model.prefill(context_text, prepare=["snapkv"])
    assert base.keep_measured == 1.0
    ctx = base.compress("snapkv", keep=0.25, scores=True, question_template=TEMPLATE)
    s = ctx.scores(2, 1)
    assert s.dtype == np.float32 and s.shape == (ctx.context_tokens,)
    # Every position has a score; SnapKV's observation window at the end scores +inf (always kept).
    assert not np.isnan(s).any() and np.isfinite(s[: ctx.context_tokens // 2]).all()
    assert (s[ctx.kept_positions(2, 1)].min() >= np.delete(s, ctx.kept_positions(2, 1)).max())
    direct = model.compress(context_text, press="snapkv", keep=0.25, question_template=TEMPLATE)
    np.testing.assert_array_equal(ctx.kept_positions(2, 1), direct.kept_positions(2, 1))
    # Press options as keywords (values turned into the engine's key=value text).
    snap = [p for p in kvshrink.presses() if p.name == "snapkv"][0]
    opts = {p.name: p.default for p in snap.params}
    with_opts = model.compress(context_text, press="snapkv", keep=0.25, question_template=TEMPLATE, **opts)
    np.testing.assert_array_equal(with_opts.kept_positions(0, 0), direct.kept_positions(0, 0))
    assert with_opts.options["options"] == opts
    # Non-default options take effect. An observation window of 8 (default 64) ranks from other
    # queries, so other positions are kept, and it keeps its own 8 trailing tokens in every head.
    n = ctx.context_tokens
    small = model.compress(context_text, press="snapkv", keep=0.25, question_template=TEMPLATE, window_size=8,
                           pooling="max")
    assert small.options["options"] == {"window_size": "8", "pooling": "max"}
    heads = [(layer, head) for layer in range(4) for head in range(4)]
    assert any(not np.array_equal(small.kept_positions(l, h), direct.kept_positions(l, h)) for l, h in heads)
    for l, h in heads:
        assert set(range(n - 8, n)) <= set(small.kept_positions(l, h).tolist())
    # sinks= and window= protect the first and last tokens of every head (KeyDiff protects none
    # by default, and drops some of them without).
    prot = model.compress(context_text, press="keydiff", keep=0.25, question_template=TEMPLATE, sinks=5, window=16)
    assert prot.options["sinks"] == 5 and prot.options["window"] == 16
    protected = set(range(5)) | set(range(n - 16, n))
    for l, h in heads:
        assert protected <= set(prot.kept_positions(l, h).tolist())
    plain = model.compress(context_text, press="keydiff", keep=0.25, question_template=TEMPLATE)
    assert any(not protected <= set(plain.kept_positions(l, h).tolist()) for l, h in heads)


def test_errors_carry_the_engine_message(model, tmp):
    missing = str(tmp / "no-such-model.gguf")
    with pytest.raises(kvshrink.Error, match="no-such-model.gguf"):
        kvshrink.Model(missing)
    with pytest.raises(kvshrink.Error, match="no-such-press"):
        model.compress("some text", press="no-such-press", keep=0.5)
    with pytest.raises(kvshrink.Error, match="no_such_option"):
        model.compress("some text", press="snapkv", keep=0.5, no_such_option=3)
    with pytest.raises(kvshrink.Error, match="keep"):
        model.compress("some text", press="snapkv", keep=2.0)
    with pytest.raises(kvshrink.Error, match="question_template must contain"):
        model.compress("some text", press="snapkv", keep=0.5, question_template="no placeholder")
    with pytest.raises(kvshrink.Error, match="threads"):
        kvshrink.Model(MODEL, threads=-1)
    with pytest.raises(kvshrink.Error, match="missing.kvc"):
        kvshrink.load(str(tmp / "missing.kvc"), model)
    with pytest.raises(RuntimeError):  # kvshrink.Error is a RuntimeError
        model.compress("some text", press="no-such-press", keep=0.5)
    ctx = model.compress("some text to compress", press="snapkv", keep=0.5)
    with pytest.raises(kvshrink.Error, match="keep_scores"):
        ctx.scores(0, 0)
    with pytest.raises(kvshrink.Error, match="layer"):
        ctx.kept_positions(99, 0)


def test_generate(model):
    text = model.generate("One of the special magic numbers for quiet-harbor is:", max_new_tokens=6, stop_at_eog=False)
    assert isinstance(text, str) and text
    a = model.generate("Hello", max_new_tokens=4, stop_at_eog=False, details=True)
    assert len(a.tokens) == 4 and a.text == str(a)
    assert model.info["n_layer"] == 4
    ids = model.tokenize("hello world")
    assert model.detokenize(ids[1:]) == "hello world"


def test_threads_share_one_model(model, context_text):
    """The GIL is released while the engine runs, and calls from several threads on one model run
    one at a time (the model's lock): every thread gets the answer a single thread gets."""
    import threading

    want = model.compress(context_text, "keydiff", keep=0.5, question_template=TEMPLATE).ask(QUESTION, max_new_tokens=8)
    got, errors = [None] * 3, []

    def work(i):
        try:
            ctx = model.compress(context_text, "keydiff", keep=0.5, question_template=TEMPLATE)
            got[i] = ctx.ask(QUESTION, max_new_tokens=8)
            del ctx  # frees its pages while other threads run the engine
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    # The main thread keeps running Python while the workers are inside the engine: it could not
    # if the GIL were held for a whole call (each takes tens of milliseconds or more).
    spins = 0
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        spins += 1
    for t in threads:
        t.join()
    assert not errors, errors
    assert got == [want] * 3
    assert spins > 1000
