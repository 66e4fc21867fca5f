"""Fast checks of the testbed pipeline (about a minute on one core; no trained model needed).

  /usr/bin/python3 -m testbed.selftest

1. tokenizer: continuation encoding == whole-string encoding at space/newline boundaries
2. tasks: exact lengths, determinism by (seed, step), answer spans present, string round trip
3. model: chunked attention == plain attention; KV-cache greedy == full-forward greedy;
   rotate-half RoPE == the formula written out by hand
4. export: safetensors write/read round trip (F32 exact, F16 within rounding), ckpt -> HF dir ->
   testbed.model and the independent reference forward agree
"""
import os
import tempfile

import numpy as np
import torch

from . import tasks as T
from .model import Config, LlamaForCausalLM, apply_rope, rope_cos_sin
from .plant import plant_induction_circuit


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
    print("ok  ", msg)


def main():
    torch.set_num_threads(1)
    R = T.Resources()
    tok = R.tok
    # 1. tokenizer
    pairs = [("Some text here.", "\n\nRepeat the previous context exactly."),
             ("The number", " is 1234567."), ("a list:", "\nkey: value"), ("x", "  two spaces"),
             ("caf\u00e9", " \u65e5\u672c\u8a9e"), ("1", " 2 3")]
    for a, b in pairs:
        check(tok.encode(a + b) == tok.encode(a) + tok.encode_cont(b), "encode_cont %r + %r" % (a, b))
    check(tok.vocab_size == 4096 and tok.bos == 1 and tok.eos == 2 and tok.unk == 0, "special ids unk=0 bos=1 eos=2, vocab 4096")
    check([tok.piece(i) for i in tok.encode(" 7654321")][-7:] == list("7654321"), "split digits")

    # 2. tasks
    from .curriculum import CURRICULA
    cur = CURRICULA["main"]
    mism = n = 0
    for ph in cur["phases"]:
        for L in ph["lens"]:
            x, w, k, tasks = T.make_batch(R, 3, 17, L, 4, ph["mix"], ph["params"])
            x2, w2, k2, _ = T.make_batch(R, 3, 17, L, 4, ph["mix"], ph["params"])
            check(x.shape == (4, L) and (x == x2).all() and (w == w2).all(), "%s L=%d: shape and determinism" % (ph["name"], L))
            check((x[:, 0] == tok.bos).all(), "%s L=%d: BOS first" % (ph["name"], L))
    rng = np.random.default_rng(0)
    for task in ["niah", "kv", "vt", "copy", "text"]:
        for i in range(20):
            ex = T.GENS[task](R, rng, 512, cur["phases"][2]["params"].get(task, {}))
            if ex is None:
                continue
            ids = [int(v) for v in ex[0] if v != 0]
            if task in ("niah", "kv", "vt"):
                assert (ex[2] == T.K_ANS).any()
            n += 1
            mism += tok.encode(tok.decode(ids[1:])) != ids[1:]
    # copy-partial examples concatenate ids like KVzip (not string-exact); a few byte-fallback
    # characters cut by a window also differ
    check(mism <= 0.15 * n, "string round trip of generated sequences: %d/%d differ" % (mism, n))
    # v8: every phase and length builds, deterministically; question-side key tokens (qkey) present;
    # RULER multikey_2 sequences (needle_hay) and streamed text round-trip through the string
    v8 = CURRICULA["v8"]
    for ph in v8["phases"]:
        for L in ph["lens"]:
            x, w, k, tasks = T.make_batch(R, 1, 5, L, max(1, 4096 // L), ph["mix"], ph["params"])
            x2, _, k2, _ = T.make_batch(R, 1, 5, L, max(1, 4096 // L), ph["mix"], ph["params"])
            check(x.shape[1] == L and (x == x2).all() and (k == k2).all() and (x[:, 0] == tok.bos).all(),
                  "v8 %s L=%d: shape, BOS and determinism (tasks %s)" % (ph["name"], L, ",".join(sorted(set(tasks)))))
    p8 = v8["phases"][3]["params"]
    nq = rt = nn = 0
    for i in range(20):
        ex = T.gen_niah(R, rng, 1024, dict(p8["niah"], needle_hay=1.0))
        if ex is None:
            continue
        nn += 1
        nq += int((ex[2] == T.K_QKEY).any())
        ids = [int(v) for v in ex[0] if v != 0]
        rt += tok.encode(tok.decode(ids[1:])) == ids[1:]
    check(nn >= 18 and nq >= 0.6 * nn and rt >= 0.9 * nn,
          "v8 needle_hay: %d built, %d with question-side key tokens, %d round-trip" % (nn, nq, rt))
    ex = T.gen_stream(R, rng, 512, {})
    check(len(ex[0]) == 512 and (ex[2][1:] == T.K_TEXT).all(), "v8 stream: 511 text tokens after BOS")
    for L in (256, 1024):
        ids, ans, depth = T.make_eval_niah(R, 12345, 3, L)
        check(len(ids) == L and ans.isdigit() and len(ans) == 7, "eval prompt L=%d, answer %s" % (L, ans))

    # 3. model
    cfg = Config(num_hidden_layers=2)
    m = LlamaForCausalLM(cfg)
    m.init_weights(0)
    m.eval()
    ids = torch.randint(3, 4096, (2, 300))
    with torch.no_grad():
        a = m(ids)
        b = m(ids, chunk=64)
        check(float((a - b).abs().max()) < 1e-4, "chunked attention == plain (max diff %.1e)" % float((a - b).abs().max()))
        g1 = m.generate(ids[:, :50], 6)
        seq = ids[:, :50]
        for _ in range(6):
            seq = torch.cat([seq, m(seq)[:, -1:].argmax(-1)], 1)
        check((g1 == seq[:, 50:]).all(), "KV-cache greedy == full recompute greedy")
    x = torch.randn(1, 1, 5, cfg.head_dim)
    cos, sin = rope_cos_sin(cfg, torch.arange(5))
    d = cfg.head_dim
    ref = torch.empty_like(x)
    for p in range(5):
        for i in range(d // 2):
            th = p * cfg.rope_theta ** (-2 * i / d)
            x1, x2 = x[0, 0, p, i], x[0, 0, p, i + d // 2]
            ref[0, 0, p, i] = x1 * np.cos(th) - x2 * np.sin(th)
            ref[0, 0, p, i + d // 2] = x2 * np.cos(th) + x1 * np.sin(th)
    check(float((apply_rope(x, cos, sin) - ref).abs().max()) < 1e-5, "RoPE is HF rotate-half (pairs i, i+d/2)")
    # planted induction circuit (plant.py): copies repeated random ids before any training, at any
    # offset (random block lengths), and the layer-0 heads attend to the previous token
    pc = Config(tie_word_embeddings=True, rope_theta=1e6)
    pm = LlamaForCausalLM(pc)
    pm.init_weights(3)
    plant_induction_circuit(pm, 3)
    xn, _, kn, _ = T.make_batch(R, 5, 0, 256, 8, {"rep": 1.0}, {"rep": {"words": 0.0}})  # random ids
    xb, mb = torch.from_numpy(xn), torch.from_numpy(kn == T.K_COPY)
    with torch.no_grad():
        pred = pm(xb[:, :-1]).argmax(-1)
    acc = float((pred == xb[:, 1:])[mb[:, 1:]].float().mean())
    check(acc > 0.6, "planted induction circuit copies repeats at step 0 (%.0f%% at 256 tokens)" % (100 * acc))

    # 4. export
    from .export import export, load_hf, read_safetensors, write_safetensors
    from .reference_logits import Ref
    with tempfile.TemporaryDirectory() as td:
        t = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.array([1.5, -2], dtype=np.float16)}
        write_safetensors(os.path.join(td, "t.safetensors"), t, {"format": "pt"})
        back, meta = read_safetensors(os.path.join(td, "t.safetensors"))
        raw = open(os.path.join(td, "t.safetensors"), "rb").read()
        hl = int.from_bytes(raw[:8], "little")
        check(hl % 8 == 0 and meta == {"format": "pt"} and all((back[k] == t[k]).all() and back[k].dtype == t[k].dtype for k in t),
              "safetensors round trip")
        for tie in (False, True):
            cfg = Config(num_hidden_layers=2, tie_word_embeddings=tie)
            m = LlamaForCausalLM(cfg)
            m.init_weights(1)
            opt = torch.optim.AdamW(m.parameters())
            ck = os.path.join(td, "ck.pt")
            torch.save({"model": m.state_dict(), "opt": opt.state_dict(), "step": 0, "args": {}, "config": cfg.to_dict(),
                        "extra": {}}, ck)
            for dt in ("f32", "f16"):
                hf = export(ck, os.path.join(td, "hf_%s_%d" % (dt, tie)), dt)
                m2 = load_hf(hf)
                names = set(read_safetensors(os.path.join(hf, "model.safetensors"))[0])
                check(("lm_head.weight" in names) != tie, "tie=%s: lm_head.weight %s" % (tie, "omitted" if tie else "written"))
                with torch.no_grad():
                    ids = torch.randint(3, 4096, (1, 40))
                    l1 = m(ids)[0]
                    l2 = m2(ids)[0]
                    l3 = Ref(hf).forward(ids[0].tolist())
                tol = 1e-4 if dt == "f32" else 5e-2
                check(float((l1 - l2).abs().max()) < tol, "export %s tie=%s: reloaded model matches (%.1e)" % (dt, tie, float((l1 - l2).abs().max())))
                check(float((l2 - l3).abs().max()) < 1e-4, "export %s tie=%s: independent reference forward matches (%.1e)" % (dt, tie, float((l2 - l3).abs().max())))
    print("selftest: all passed")


if __name__ == "__main__":
    main()
