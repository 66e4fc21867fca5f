"""Deterministic training / evaluation sequence generators.

Every training sequence is exactly `L` token ids (BOS first; padded with id 0, weight 0, only in the
rare case a task cannot fill L) plus a per-token loss weight for predicting that token:
  * 1.0  natural text (haystacks, text windows, templates)
  * W_ANS (5.0) answer tokens of retrieval questions (needle values, list values, variable values)
  * W_COPY (1.0) the repeated tokens of a "Repeat the previous context" copy
  * W_RAND (0.25) random inserted facts inside the context (keys/values cannot be predicted)
Sequences are built at token level. Pieces are concatenated only where the string tokenization of
the concatenated text gives the same ids (word boundaries; see Tok.encode_cont), so a prompt the
engine tokenizes from the decoded string sees the same ids the model was trained on; selftest
checks this.

Tasks (see make_example):
  text   a window of training text
  niah   needles in a haystack: 1..n needles "One of the special magic numbers for KEY is: VALUE."
         (RULER wording + shorter variants), keys = single-token nouns or RULER adj-noun keys,
         values = 7-digit numbers or words; one or several queries at the end; optional
         multi-value (one key, several values, answer lists them in order)
  kv     key: value lists (plain lines or JSON), several queries
  vt     RULER variable tracking: VAR ABCDE = 12345 ... VAR FGHIJ = VAR ABCDE, ask the value of a
         chain's last variable, or list all variables of a chain (RULER's question)
  copy   KVzip's reconstruction prompts: CTX + "\n\nRepeat the previous context exactly." + CTX,
         the brief's "Repeat the previous context:" variant, and KVzip's chunk continuation
         "... starting with " + 8 tokens + next chunk; CTX has a random length
  mqar   dense multi-query associative recall: " k: v," pairs, then "Recall:" and keys in random
         order, each followed by its value
  stream (v8) BOS + a window of a book / essay starting at any token, as the perplexity evals cut it
v8 options: qkey_w (niah, kv: the key tokens of a question are predicted from the needle, see
question_pieces) and niah needle_hay (RULER multikey_2: a haystack of needles, one per line).
Held-out evaluation (make_eval_niah) uses keys from a word pool never used in training, values
from a separate RNG stream, and the 49 NIAH essays as haystack (or held-out PG-19 / WikiText).
"""
import os
import string

import numpy as np

from . import corpus
from .tokenizer import Tok

W_TEXT, W_ANS, W_COPY, W_RAND = 1.0, 5.0, 1.0, 0.25
HERE = os.path.dirname(os.path.abspath(__file__))

# haystack / text sampling weights of the training documents
DOC_WEIGHTS = {"ruler_pg_essays": 0.40, "pg19_22424": 0.10, "pg19_10985": 0.12, "pg19_10321": 0.03,
               "gsm8k_train": 0.20, "squad_train11": 0.15}


class TokDoc:
    def __init__(self, name, ids, tok_is_ws, tok_is_eos_punct, nl_id):
        self.name = name
        self.ids = np.asarray(ids, dtype=np.int32)
        ws = tok_is_ws[self.ids]
        self.word_starts = np.nonzero(ws)[0]
        prev_p = np.zeros_like(ws)
        prev_p[1:] = tok_is_eos_punct[self.ids[:-1]]
        self.sent_starts = np.nonzero(ws & prev_p)[0]
        prev_nl = np.zeros_like(ws)
        prev_nl[1:] = self.ids[:-1] == nl_id
        self.line_starts = np.nonzero(prev_nl & (self.ids != nl_id))[0]


class Resources:
    """Tokenizer, tokenized documents and word pools. Built once per process (cached on disk)."""

    def __init__(self, tok_path=None, cache_dir=None):
        self.tok = Tok(tok_path) if tok_path else Tok()
        t = self.tok
        V = t.vocab_size
        pieces = [t.piece(i) for i in range(V)]
        self.is_ws = np.array([p.startswith("\u2581") and len(p) > 1 and p[1] != "\u2581" for p in pieces])
        self.is_punct_end = np.array([p.rstrip() != "" and p[-1] in ".!?" for p in pieces])
        cache_dir = cache_dir or os.path.join(HERE, "runs", "cache")
        os.makedirs(cache_dir, exist_ok=True)
        import hashlib
        h = hashlib.md5(open(t.path, "rb").read()).hexdigest()[:10]
        cpath = os.path.join(cache_dir, "docs_%s.npz" % h)
        if os.path.exists(cpath):
            z = np.load(cpath)
            raw = {k: z[k] for k in z.files}
        else:
            raw = {}
            for name, text in corpus.training_docs():
                raw["train/" + name] = np.array(t.encode(text), dtype=np.int32)
            for name, text in corpus.heldout_docs():
                raw["heldout/" + name] = np.array(t.encode(text), dtype=np.int32)
            raw["eval/niah_essays"] = np.array(t.encode(corpus.niah_essays_text()), dtype=np.int32)
            tmp = cpath + ".tmp.npz"
            np.savez(tmp, **raw)
            os.replace(tmp, cpath)
        self.docs = {k: TokDoc(k, v, self.is_ws, self.is_punct_end, t.nl) for k, v in raw.items()}
        self.train_docs = [self.docs["train/" + n] for n in DOC_WEIGHTS]
        w = np.array([DOC_WEIGHTS[n] for n in DOC_WEIGHTS])
        self.train_doc_p = w / w.sum()

        def words(fn):
            return [x.strip() for x in open(corpus.data_path("ruler", "wonderwords", fn), encoding="utf-8") if x.strip()]
        nouns = sorted(set(w for w in words("nounlist.txt") if w.isalpha() and w.islower()))
        adjs = sorted(set(w for w in words("adjectivelist.txt") if w.isalpha() and w.islower()))
        # held-out split: every 8th word (sorted order) is reserved for evaluation keys/values
        self.nouns = {"train": [w for i, w in enumerate(nouns) if i % 8 != 0],
                      "eval": [w for i, w in enumerate(nouns) if i % 8 == 0]}
        self.adjs = {"train": [w for i, w in enumerate(adjs) if i % 8 != 0],
                     "eval": [w for i, w in enumerate(adjs) if i % 8 == 0]}
        self.nouns1 = {k: [w for w in v if len(t.encode(w)) == 1] for k, v in self.nouns.items()}
        self._cont_cache = {}

    def cont(self, s):
        """encode_cont with a cache (templates repeat a lot)."""
        r = self._cont_cache.get(s)
        if r is None:
            r = self.tok.encode_cont(s)
            if len(self._cont_cache) < 200000:
                self._cont_cache[s] = r
        return r


# ----------------------------------------------------------------------------------------------
# small helpers

# token kinds (for logging per-kind loss/accuracy); the weight of a kind is KIND_W[kind]
K_PAD, K_TEXT, K_ANS, K_COPY, K_RAND, K_QKEY = 0, 1, 2, 3, 4, 5
KIND_NAMES = {K_TEXT: "text", K_ANS: "ans", K_COPY: "copy", K_RAND: "rand", K_QKEY: "qkey"}


def _kind(w):
    return {W_ANS: K_ANS, W_RAND: K_RAND}.get(w, K_TEXT)


class Builder:
    def __init__(self, bos):
        self.ids = [bos]
        self.w = [0.0]  # weight of predicting BOS: never used (no target before it)
        self.k = [K_PAD]

    def add(self, ids, w, kind=None):
        n = len(ids)
        self.ids.extend(int(i) for i in ids)
        self.w.extend([w] * n)
        self.k.extend([kind if kind is not None else _kind(w)] * n)

    def __len__(self):
        return len(self.ids)

    def finish(self, L):
        ids, w, k = self.ids[:L], self.w[:L], self.k[:L]
        if len(ids) < L:
            pad = L - len(ids)
            ids = ids + [0] * pad
            w = w + [0.0] * pad
            k = k + [K_PAD] * pad
        return np.array(ids, dtype=np.int64), np.array(w, dtype=np.float32), np.array(k, dtype=np.int8)


def digits(rng, n=7):
    first = str(rng.integers(1, 10))
    return first + "".join(str(d) for d in rng.integers(0, 10, size=n - 1))


def pick_doc(R, rng, pool="train"):
    if pool == "train":
        return R.train_docs[rng.choice(len(R.train_docs), p=R.train_doc_p)]
    return R.docs[pool]


def window(R, rng, doc, n, at="word"):
    """n consecutive tokens of doc starting at a word start ("\u2581word": right after BOS it
    tokenizes like a document start) or at a line start (right after a newline token)."""
    n = max(0, int(n))
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    hi = len(doc.ids) - n
    if hi <= 0:
        reps = (n // len(doc.ids)) + 2
        return np.tile(doc.ids, reps)[:n]
    ws = doc.line_starts if at == "line" else doc.word_starts
    j = np.searchsorted(ws, hi)
    start = int(ws[rng.integers(0, j)]) if j > 0 else int(rng.integers(0, hi))
    return doc.ids[start:start + n]


def hay_with_inserts(R, rng, doc, n_total, inserts, depths=None, at="line"):
    """A haystack window with `inserts` (token lists, kept in order) placed at sentence starts.
    Returns list of (ids, weight) segments with exactly n_total tokens in all (if possible)."""
    n_ins = sum(len(x) for x in inserts)
    n_hay = max(0, n_total - n_ins)
    hay = window(R, rng, doc, n_hay, at=at)
    if not inserts:
        return [(hay, W_TEXT)]
    # candidate positions: sentence starts inside the window (fallback word starts, then anywhere)
    isws = R.is_ws[hay]
    prevp = np.zeros(len(hay), dtype=bool)
    prevp[1:] = R.is_punct_end[hay[:-1]]
    cand = np.nonzero(isws & prevp)[0]
    if len(cand) == 0:
        cand = np.nonzero(isws)[0]
    if len(cand) == 0:
        cand = np.array([len(hay)])
    cand = np.concatenate([cand, [len(hay)]])  # the end of the haystack is always a valid spot
    if depths is None:
        pos = np.sort(rng.choice(cand, size=len(inserts), replace=True))
    else:
        pos = np.array([cand[np.argmin(np.abs(cand - d * len(hay)))] for d in depths])
        pos = np.sort(pos)
    segs, prev = [], 0
    for p, ins in zip(pos, inserts):
        segs.append((hay[prev:p], W_TEXT))
        segs.append((ins, W_RAND))
        prev = p
    segs.append((hay[prev:], W_TEXT))
    return segs


# ----------------------------------------------------------------------------------------------
# keys / values

def make_key(R, rng, kind, pool):
    if kind == "word1":
        return str(rng.choice(R.nouns1[pool]))
    if kind == "adjnoun":  # RULER niah key: "{adj}-{noun}"
        return "%s-%s" % (rng.choice(R.adjs[pool]), rng.choice(R.nouns[pool]))
    if kind == "digits7":
        return digits(rng)
    raise ValueError(kind)


def make_value(R, rng, kind, pool):
    if kind == "digits7":
        return digits(rng)
    if kind == "word1":
        return str(rng.choice(R.nouns1[pool]))
    if kind == "word":
        return str(rng.choice(R.nouns[pool]))
    raise ValueError(kind)


def distinct(fn, n, rng, tries=100):
    out = []
    for _ in range(tries * n):
        x = fn()
        if x not in out:
            out.append(x)
            if len(out) == n:
                break
    return out


def choose(rng, dist):
    """dist: dict name -> prob."""
    names = list(dist)
    p = np.array([dist[n] for n in names], dtype=np.float64)
    return names[rng.choice(len(names), p=p / p.sum())]


# ----------------------------------------------------------------------------------------------
# needle templates. tv: "number" or "word". RULER's own wording is template 0.

def niah_templates(tv):
    return [
        dict(header="Some special magic %ss are hidden within the following text. Make sure to memorize it. "
                    "I will quiz you about the %ss afterwards.\n" % (tv, tv),
             needle=" One of the special magic %ss for {k} is: {v}." % tv,
             q="\nWhat is the special magic %s for {k} mentioned in the provided text?"
               " The special magic %s for {k} mentioned in the provided text is" % (tv, tv),
             qmulti="\nWhat are all the special magic %ss for {k} mentioned in the provided text?"
                    " The special magic %ss for {k} mentioned in the provided text are" % (tv, tv)),
        dict(header="", needle=" The special magic %s for {k} is: {v}." % tv,
             q="\nThe special magic %s for {k} is" % tv,
             qmulti="\nThe special magic %ss for {k} are" % tv),
        dict(header="", needle=" The %s for {k} is {v}." % tv,
             q="\nQuestion: What is the %s for {k}? Answer: The %s for {k} is" % (tv, tv),
             qmulti="\nQuestion: What are the %ss for {k}? Answer: The %ss for {k} are" % (tv, tv)),
        dict(header="", needle=" Remember: the secret %s of {k} is {v}." % tv,
             q="\nWhat is the secret %s of {k}? The secret %s of {k} is" % (tv, tv),
             qmulti="\nWhat are the secret %ss of {k}? The secret %ss of {k} are" % (tv, tv)),
    ]


def _tv(vkind):
    return "number" if vkind.startswith("digits") else "word"


def gen_niah(R, rng, L, p, pool="train", hay_pool="train"):
    """p: dict with keys key_kinds, value_kinds, max_needles, max_queries, multivalue, templates;
    v8 adds qkey_w (question_pieces) and needle_hay (share of gen_niah_needle_hay sequences)."""
    if p.get("needle_hay") and rng.random() < p["needle_hay"]:  # no draw when absent: v7 unchanged
        return gen_niah_needle_hay(R, rng, L, p, pool)
    vkind = choose(rng, p["value_kinds"])
    kkind = choose(rng, p["key_kinds"])
    tv = _tv(vkind)
    temps = niah_templates(tv)
    ti = int(rng.choice(len(temps), p=np.array(p.get("template_p", [0.4, 0.2, 0.2, 0.2]))))
    T = temps[ti]
    n_needles = int(rng.integers(1, p["max_needles"] + 1))
    multi = rng.random() < p.get("multivalue", 0.0)
    keys = distinct(lambda: make_key(R, rng, kkind, pool), n_needles, rng)
    if multi:  # one key with 2-4 values (+ other keys as distractors)
        nv = int(rng.integers(2, 5))
        vals = {keys[0]: distinct(lambda: make_value(R, rng, vkind, pool), nv, rng)}
        for k in keys[1:]:
            vals[k] = [make_value(R, rng, vkind, pool)]
    else:
        vals = {k: [make_value(R, rng, vkind, pool)] for k in keys}
    facts = [(k, v) for k in keys for v in vals[k]]
    order = rng.permutation(len(facts))
    facts = [facts[i] for i in order]
    if multi:  # the multi-valued key's values must stay in order of appearance
        mv = iter(vals[keys[0]])
        facts = [(k, next(mv)) if k == keys[0] else (k, v) for k, v in facts]
    n_q = int(rng.integers(1, min(len(keys), p["max_queries"]) + 1))
    qkeys = [keys[0]] + [k for k in keys[1:]] if multi else list(keys)
    qkeys = [qkeys[0]] + list(rng.permutation(qkeys[1:])) if multi else list(rng.permutation(qkeys))
    qkeys = qkeys[:n_q]
    # tail (questions + answers)
    tail = []
    for k in qkeys:
        vs = vals[k]
        q = (T["qmulti"] if len(vs) > 1 else T["q"]).format(k=k)
        tail.extend(question_pieces(R, R.cont(q), k, p.get("qkey_w")))
        tail.append((R.cont(" " + ", ".join(vs) + "."), W_ANS))
    head = R.tok.encode(T["header"].rstrip("\n")) + [R.tok.nl] if T["header"] else []
    inserts = [R.cont(T["needle"].format(k=k, v=v)) for k, v in facts]
    n_fixed = 1 + len(head) + sum(len(piece[0]) for piece in tail)
    n_hay_total = L - n_fixed
    if n_hay_total < sum(len(x) for x in inserts) + 4:
        return None
    b = Builder(R.tok.bos)
    if head:
        b.add(head, W_TEXT)
    doc = pick_doc(R, rng, hay_pool)
    for ids, w in hay_with_inserts(R, rng, doc, n_hay_total, inserts, at="line" if head else "word"):
        b.add(ids, w)
    for piece in tail:
        b.add(*piece)
    return b.finish(L)


def gen_niah_needle_hay(R, rng, L, p, pool="train"):
    """RULER niah_multikey_2 (the engine's `ruler_niah_multikey_2`, src/eval/tasks_niah.cpp): the
    RULER header, then a haystack made only of needles, one per line ("One of the special magic
    numbers for KEY is: VALUE." at line starts), as many as fit; 1..max_queries of them asked
    (RULER wording), each answer right after its question. Every line is a distractor for the
    others, so the question (and its key tokens, qkey_w) must find the one line with its key."""
    vkind = choose(rng, p["value_kinds"])
    kkind = choose(rng, p["key_kinds"])
    tv = _tv(vkind)
    T = niah_templates(tv)[0]
    head = R.tok.encode(T["header"].rstrip("\n"))
    line_fmt = "\n" + T["needle"][1:]  # "\nOne of the special magic ... for {k} is: {v}."
    n_q_max = int(rng.integers(1, p.get("max_queries", 4) + 1))
    lines, keys, vals = [], [], []
    used = 1 + len(head)
    tail_est = 2 * (len(R.cont(T["q"].format(k="x-y"))) + 16)
    for _ in range(L):
        k = make_key(R, rng, kkind, pool)
        if k in keys:
            continue
        v = make_value(R, rng, vkind, pool)
        ids = R.cont(line_fmt.format(k=k, v=v))
        if used + len(ids) + n_q_max * tail_est // 2 > L:
            break
        lines.append(ids)
        keys.append(k)
        vals.append(v)
        used += len(ids)
    if len(lines) < 2:
        return None
    tail = []
    for i in rng.permutation(len(keys))[:n_q_max]:
        piece = question_pieces(R, R.cont(T["q"].format(k=keys[i])), keys[i], p.get("qkey_w"))
        ans = (R.cont(" " + vals[i] + "."), W_ANS)
        if used + sum(len(x[0]) for x in piece) + len(ans[0]) > L:
            break
        tail.extend(piece)
        tail.append(ans)
        used += sum(len(x[0]) for x in piece) + len(ans[0])
    if not tail:
        return None
    b = Builder(R.tok.bos)
    b.add(head, W_TEXT)
    for ids in lines:
        b.add(ids, W_RAND)
    for piece in tail:
        b.add(*piece)
    r = L - len(b)
    if r > 2:  # fill with text after a blank line (as the other tasks fill with text before)
        b.add([R.tok.nl, R.tok.nl], W_TEXT)
        b.add(window(R, rng, pick_doc(R, rng), r - 2, at="line"), W_TEXT)
    return b.finish(L)


def question_pieces(R, qids, key, qkey_w):
    """A question as (ids, weight[, kind]) pieces. With qkey_w (v8), the tokens of the key's first
    mention in the question after its first token get weight qkey_w (kind K_QKEY): they can only
    be predicted by attending from the question to the needle that holds the key, so the question's
    own tokens learn to look at the needle (the v7 models retrieved only while answering: issue 27).
    The first token stays unweighted-as-text (which key is asked is random); a key whose ids do not
    appear as such in the question (merged with punctuation) leaves the question as plain text."""
    if not qkey_w:
        return [(qids, W_TEXT)]
    kid = R.cont(" " + key)
    n = len(kid)
    if n < 2:
        return [(qids, W_TEXT)]
    for i in range(len(qids) - n + 1):
        if qids[i:i + n] == kid:
            return [(qids[:i + 1], W_TEXT), (qids[i + 1:i + n], qkey_w, K_QKEY), (qids[i + n:], W_TEXT)]
    return [(qids, W_TEXT)]


def gen_kv(R, rng, L, p, pool="train"):
    vkind = choose(rng, p["value_kinds"])
    kkind = choose(rng, p["key_kinds"])
    tv = _tv(vkind)
    style = int(rng.integers(0, 3))
    n = int(rng.integers(2, p["max_pairs"] + 1))
    keys = distinct(lambda: make_key(R, rng, kkind, pool), n, rng)
    vals = [make_value(R, rng, vkind, pool) for _ in keys]
    if style == 0:
        head = R.cont("\n\nHere is a list of keys and %ss:" % tv)
        # "- key": a key at a line start would tokenize without its word-start piece ("f|old" vs
        # "▁fold" in the question) and the lookup could not match (bug until session 6)
        lines = [R.cont("\n- %s: %s" % (k, v)) for k, v in zip(keys, vals)]
        qfmt, afmt = "\n\nWhat is the %s for {k}? The %s for {k} is" % (tv, tv), " {v}"
    elif style == 1:
        head = R.cont("\n\nJSON data:\n{")
        lines = [R.cont('\n "%s": "%s"%s' % (k, v, "," if i < n - 1 else "\n}")) for i, (k, v) in enumerate(zip(keys, vals))]
        qfmt, afmt = '\nKey: "{k}"\nThe value associated with the specified key is:', ' "{v}"'
    else:
        head = R.cont("\n\nList:")
        lines = [R.cont(" %s = %s," % (k, v)) for k, v in zip(keys, vals)]
        qfmt, afmt = "\n {k} =", " {v}"
    n_q = int(rng.integers(1, min(n, p["max_queries"]) + 1))
    qi = rng.permutation(n)[:n_q]
    tail = []
    for i in qi:
        tail.extend(question_pieces(R, R.cont(qfmt.format(k=keys[i])), keys[i], p.get("qkey_w")))
        tail.append((R.cont(afmt.format(v=vals[i])), W_ANS))
    core = head + [i for l in lines for i in l]
    n_tail = sum(len(x[0]) for x in tail)
    n_pre = L - 1 - len(core) - n_tail
    if n_pre < 0:
        return None
    b = Builder(R.tok.bos)
    b.add(window(R, rng, pick_doc(R, rng), n_pre), W_TEXT)
    b.add(head, W_TEXT)
    for l in lines:
        b.add(l, W_RAND)
    for piece in tail:
        b.add(*piece)
    return b.finish(L)


def gen_vt(R, rng, L, p, pool="train"):
    n_chains = int(rng.integers(1, p.get("max_chains", 2) + 1))
    hops = p.get("max_hops", 3)
    names = distinct(lambda: "".join(rng.choice(list(string.ascii_uppercase), size=5)), n_chains * (hops + 1), rng)
    chains, inserts_by_chain = [], []
    for c in range(n_chains):
        nh = int(rng.integers(1, hops + 1))
        vs = names[c * (hops + 1): c * (hops + 1) + nh + 1]
        val = digits(rng, 5)
        chains.append((vs, val))
        ins = [R.cont(" VAR %s = %s." % (vs[0], val))]
        ins += [R.cont(" VAR %s = VAR %s." % (vs[j + 1], vs[j])) for j in range(nh)]
        inserts_by_chain.append(ins)
    # interleave chains keeping each chain's internal order
    seq, idx = [], [0] * n_chains
    while any(idx[c] < len(inserts_by_chain[c]) for c in range(n_chains)):
        c = int(rng.choice([c for c in range(n_chains) if idx[c] < len(inserts_by_chain[c])]))
        seq.append(inserts_by_chain[c][idx[c]])
        idx[c] += 1
    head = R.tok.encode("Memorize and track the chain(s) of variable assignment hidden in the following text.") + [R.tok.nl, R.tok.nl]
    ci = int(rng.integers(0, n_chains))
    vs, val = chains[ci]
    if rng.random() < 0.5:
        tail = [(R.cont("\nQuestion: What is the value of VAR %s? Answer: The value of VAR %s is" % (vs[-1], vs[-1])), W_TEXT),
                (R.cont(" " + val + "."), W_ANS)]
    else:
        tail = [(R.cont("\nQuestion: Find all variables that are assigned the value %s in the text above."
                        " Answer: According to the chain(s) of variables assigned in the text above, %d variables"
                        " are assigned the value %s, they are:" % (val, len(vs), val)), W_TEXT),
                (R.cont(" " + " ".join(vs)), W_ANS)]
    n_hay = L - 1 - len(head) - sum(len(x) for x, _ in tail)
    if n_hay < sum(len(x) for x in seq) + 4:
        return None
    b = Builder(R.tok.bos)
    b.add(head, W_TEXT)
    for ids, w in hay_with_inserts(R, rng, pick_doc(R, rng), n_hay, seq):
        b.add(ids, w)
    for ids, w in tail:
        b.add(ids, w)
    return b.finish(L)


def gen_mqar(R, rng, L, p, pool="train"):
    """Dense multi-query associative recall (Zoology's MQAR, in words): a list of key: value pairs,
    then "Recall:" and keys in random order, each followed by its value (the answer). Many answers
    per sequence, so lookup heads get a strong signal early."""
    vkind = choose(rng, p["value_kinds"])
    kkind = choose(rng, p["key_kinds"])
    n_max = p.get("max_pairs", 16)
    head = R.tok.encode("Memorize the pairs.")
    pairs, used = [], 1 + len(head)
    keys = distinct(lambda: make_key(R, rng, kkind, pool), n_max, rng)
    budget = int((L - used) * rng.uniform(0.3, 0.55))
    # "k v," (value right after its key: a plain induction head solves it) or "k: v," (needs the
    # key two tokens back, like every natural format)
    sep = ":" if rng.random() >= p.get("nosep", 0.0) else ""
    for k in keys:
        v = make_value(R, rng, vkind, pool)
        seg = R.cont(" %s%s %s," % (k, sep, v))
        if used + len(seg) > 1 + len(head) + budget and pairs:
            break
        pairs.append((k, v, seg))
        used += len(seg)
    b = Builder(R.tok.bos)
    b.add(head, W_TEXT)
    for k, v, seg in pairs:
        b.add(seg, W_RAND)
    b.add(R.cont("\nRecall:"), W_TEXT)
    order = list(rng.permutation(len(pairs)))
    while len(b) < L:
        if not order:
            order = list(rng.permutation(len(pairs)))
        k, v, _ = pairs[order.pop()]
        b.add(R.cont(" %s%s" % (k, sep)), W_RAND)
        b.add(R.cont(" %s," % v), W_ANS)
    return b.finish(L)


COPY_PROMPTS = ["\n\nRepeat the previous context exactly.", "\n\nRepeat the previous context:"]
COPY_PART = "\n\nRepeat the part of the previous context exactly, starting with "


def gen_copy(R, rng, L, p):
    doc = pick_doc(R, rng)
    b = Builder(R.tok.bos)
    if rng.random() < p.get("partial", 0.3):
        prompt = R.cont(COPY_PART)
        m2 = int(rng.integers(max(8, L // 10), max(9, L // 3)))
        m1 = L - 1 - len(prompt) - 8 - m2
        if m1 < m2 + 16:
            return None
        ctx = window(R, rng, doc, m1)
        s = int(rng.integers(8, m1 - m2 + 1))
        b.add(ctx, W_TEXT)
        b.add(prompt, W_TEXT)
        b.add(ctx[s - 8:s], W_COPY * 0.5, K_COPY)
        b.add(ctx[s:s + m2], W_COPY, K_COPY)
        return b.finish(L)
    # full copy of a context of RANDOM length, then unrelated text to fill L. (A fixed length
    # lets the model copy with a fixed relative-position head instead of content-based induction
    # heads -- measured: the first curriculum copied 79% of tokens at the trained length and 5%
    # at any other.)
    pi = int(rng.integers(0, len(COPY_PROMPTS)))
    prompt = R.cont(COPY_PROMPTS[pi]) + ([R.tok.nl] if pi == 1 else [])
    hi = (L - 1 - len(prompt)) // 2
    if hi < 8:
        return None
    m = int(rng.integers(min(hi, max(8, L // 8)), hi + 1))
    if rng.random() < p.get("random_words", 0.0):
        # a context of random single-token nouns: only an induction head can predict its copy
        ctx = [t for w in rng.choice(R.nouns1["train"], size=m) for t in R.cont(" " + str(w))][:m]
    else:
        ctx = window(R, rng, doc, m)
    b.add(ctx, W_TEXT)
    b.add(prompt, W_TEXT)
    b.add(ctx, W_COPY, K_COPY)
    r = L - len(b)
    if r > 2:
        b.add([R.tok.nl, R.tok.nl], W_TEXT)
        b.add(window(R, rng, pick_doc(R, rng), r - 2, at="line"), W_TEXT)
    return b.finish(L)


def gen_rep(R, rng, L, p):
    """Repeated random tokens (the classic induction-head task): a random sequence of m tokens
    (single-token nouns, or any non-control token) and its repetition, again and again until L.
    Only a content-based induction head predicts the repeats (random block lengths rule out a
    fixed-offset head); measured: slow to form here, see README Status and probe_induction.py."""
    b = Builder(R.tok.bos)
    while len(b) < L:
        m = int(rng.integers(8, max(9, L // 3)))
        if rng.random() < p.get("words", 0.5):
            seq = [t for w in rng.choice(R.nouns1["train"], size=m) for t in R.cont(" " + str(w))][:m]
        else:
            seq = list(rng.integers(3, R.tok.vocab_size, size=m))
        b.add(seq, W_RAND)
        b.add(seq, W_COPY, K_COPY)
    return b.finish(L)


def gen_text(R, rng, L, p):
    b = Builder(R.tok.bos)
    b.add(window(R, rng, pick_doc(R, rng), L - 1), W_TEXT)
    return b.finish(L)


# long-form documents for "stream" (books and essays: text whose next token depends on far context)
STREAM_DOCS = {"ruler_pg_essays": 0.4, "pg19_22424": 0.2, "pg19_10985": 0.3, "pg19_10321": 0.1}


def gen_stream(R, rng, L, p):
    """Streamed text, as the engine's perplexity tasks (ppl_wikitext2 / ppl_pg19) cut it: BOS, then
    L - 1 consecutive tokens of a long document starting at ANY token (mid-word, mid-sentence), not
    at a word start as `text` does; mostly long-form books and essays (STREAM_DOCS) so that a
    2,048-token window has long-range structure to use. v8."""
    docs = p.get("docs", STREAM_DOCS)
    name = choose(rng, docs)
    ids = R.docs["train/" + name].ids
    n = L - 1
    if len(ids) <= n:
        ids = np.tile(ids, n // len(ids) + 2)
    start = int(rng.integers(0, len(ids) - n + 1))
    b = Builder(R.tok.bos)
    b.add(ids[start:start + n], W_TEXT)
    return b.finish(L)


GENS = {"rep": gen_rep, "text": gen_text, "niah": gen_niah, "kv": gen_kv, "vt": gen_vt, "copy": gen_copy, "mqar": gen_mqar,
        "stream": gen_stream}


def make_example(R, rng, L, mix, params):
    """One (ids[L], weights[L], task) drawn from mix (task -> prob) with per-task params."""
    for _ in range(50):
        task = choose(rng, mix)
        ex = GENS[task](R, rng, L, params.get(task, {}))
        if ex is not None:
            return ex + (task,)
    raise RuntimeError("could not build an example at L=%d" % L)


def make_batch(R, seed, step, L, B, mix, params):
    """Batch of step `step`: a pure function of (seed, step, L, mix, params)."""
    rng = np.random.default_rng([seed, step, L])
    xs, ws, ks, tasks = [], [], [], []
    for _ in range(B):
        x, w, k, t = make_example(R, rng, L, mix, params)
        xs.append(x)
        ws.append(w)
        ks.append(k)
        tasks.append(t)
    return np.stack(xs), np.stack(ws), np.stack(ks), tasks


# ----------------------------------------------------------------------------------------------
# held-out evaluation

EVAL_HAYSTACKS = {"essays": "eval/niah_essays", "pg19": "heldout/pg19_10146", "wikitext": "heldout/wikitext2_test"}


def make_eval_niah(R, seed, idx, L, vkind="digits7", hay="essays", n_needles=1, kkind="adjnoun"):
    """A held-out NIAH prompt in RULER's wording (niah_single_2 / multikey_1 style).
    Returns (prompt_ids (exactly L tokens incl. BOS), answer string, depth).
    Keys/values come from the eval word pool and a separate seed stream; depth is stratified."""
    rng = np.random.default_rng([seed, 7919, idx, L, len(vkind), n_needles])
    tv = _tv(vkind)
    T = niah_templates(tv)[0]
    keys = distinct(lambda: make_key(R, rng, kkind, "eval"), n_needles, rng)
    vals = [make_value(R, rng, vkind, "eval") for _ in keys]
    target = 0
    q = R.cont(T["q"].format(k=keys[target]))
    head = R.tok.encode(T["header"].rstrip("\n")) + [R.tok.nl]
    inserts = [R.cont(T["needle"].format(k=k, v=v)) for k, v in zip(keys, vals)]
    depth = (idx % 10 + 0.5) / 10.0  # 10 depth buckets
    depths = [depth] + list(rng.random(n_needles - 1))
    order = np.argsort(depths)
    n_hay_total = L - 1 - len(head) - len(q)
    b = Builder(R.tok.bos)
    b.add(head, W_TEXT)
    # pick a random window of the eval haystack; keep needle order by depth
    segs = hay_with_inserts(R, rng, R.docs[EVAL_HAYSTACKS[hay]], n_hay_total,
                            [inserts[i] for i in order], depths=[depths[i] for i in order])
    for ids, w in segs:
        b.add(ids, w)
    b.add(q, W_TEXT)
    ids = b.finish(L)[0]
    assert len(b) == L, (len(b), L)
    return ids, vals[target], depth
