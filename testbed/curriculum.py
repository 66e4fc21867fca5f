"""Curricula: phases of (sequence lengths, task mix, task parameters).

Design (from ../shared/TESTBED_NOTES.md and the checks in README.md):
  1. induct  - 128 tokens: copying and short key: value lists / needles whose keys AND values are
               single-token nouns, so the first thing learnt is a one-hop lookup (induction heads).
  2. digits  - 256 tokens: 7-digit values (7 tokens after a word-start piece), RULER adj-noun keys,
               variable tracking, multi-value needles.
  3. len512, 4. len1024, 5. len2048 - the same tasks at the lengths to be evaluated (length
               generalisation is weak), always mixed with shorter sequences so short skills stay.
Every step has `tokens_per_step` tokens: batch = tokens_per_step // L for the L drawn that step.
"""

NIAH_EARLY = dict(key_kinds={"word1": 1.0}, value_kinds={"word1": 1.0}, max_needles=3, max_queries=3,
                  multivalue=0.0, template_p=[0.15, 0.45, 0.2, 0.2])
KV_EARLY = dict(key_kinds={"word1": 1.0}, value_kinds={"word1": 1.0}, max_pairs=8, max_queries=4)
MQAR_EARLY = dict(key_kinds={"word1": 1.0}, value_kinds={"word1": 1.0}, max_pairs=16, nosep=0.5)


def niah(max_needles, multivalue=0.1, digits=0.6):
    return dict(key_kinds={"word1": 0.35, "adjnoun": 0.65},
                value_kinds={"digits7": digits, "word1": (1 - digits) / 2, "word": (1 - digits) / 2},
                max_needles=max_needles, max_queries=4, multivalue=multivalue,
                template_p=[0.45, 0.2, 0.2, 0.15])


def kv(max_pairs, digits=0.5):
    return dict(key_kinds={"word1": 0.6, "adjnoun": 0.4},
                value_kinds={"digits7": digits, "word1": 1 - digits}, max_pairs=max_pairs, max_queries=4)


def mqar(max_pairs, digits=0.5):
    return dict(key_kinds={"word1": 0.5, "adjnoun": 0.5},
                value_kinds={"digits7": digits, "word1": 1 - digits}, max_pairs=max_pairs)


def later(max_needles, max_pairs, mqar_pairs, hops, chains, partial):
    return {"niah": niah(max_needles), "kv": kv(max_pairs), "mqar": mqar(mqar_pairs),
            "vt": dict(max_chains=chains, max_hops=hops), "copy": dict(partial=partial)}


CURRICULA = {
    "main": dict(
        tokens_per_step=4096, warmup=200, lr=2e-3, min_lr_frac=0.1,
        phases=[
            # Induction heads first. Measured: mixed with text and lookups, no head formed in
            # 1,500 steps (copy of random words 10%, associative recall 0%); a model of this code
            # trained only on a fixed-offset repeat gets 100% in 150 steps (a positional head -- see README Status). So phase 0 is almost
            # all synthetic copying / no-separator recall, in half-size batches (steps matter).
            dict(name="induct", steps=400, lens={128: 1.0}, tokens_per_step=2048,
                 mix={"copy": 0.50, "mqar": 0.35, "text": 0.15},
                 params={"mqar": dict(MQAR_EARLY, nosep=0.7), "copy": dict(partial=0.2, random_words=0.8)}),
            dict(name="lookup", steps=1200, lens={128: 1.0}, tokens_per_step=2048,
                 mix={"mqar": 0.25, "copy": 0.25, "kv": 0.20, "niah": 0.15, "text": 0.15},
                 params={"niah": NIAH_EARLY, "kv": KV_EARLY, "mqar": MQAR_EARLY,
                         "copy": dict(partial=0.3, random_words=0.4)}),
            dict(name="digits", steps=1400, lens={256: 0.85, 128: 0.15},
                 mix={"text": 0.15, "copy": 0.15, "mqar": 0.15, "kv": 0.15, "niah": 0.30, "vt": 0.10},
                 params=later(4, 16, 24, 3, 2, 0.4)),
            dict(name="len512", steps=1400, lens={512: 0.75, 256: 0.25},
                 mix={"text": 0.20, "copy": 0.15, "mqar": 0.10, "kv": 0.15, "niah": 0.30, "vt": 0.10},
                 params=later(6, 32, 48, 4, 2, 0.5)),
            dict(name="len1024", steps=2400, lens={1024: 0.65, 512: 0.2, 256: 0.15},
                 mix={"text": 0.20, "copy": 0.15, "mqar": 0.10, "kv": 0.10, "niah": 0.35, "vt": 0.10},
                 params=later(8, 48, 64, 4, 3, 0.5)),
            dict(name="len2048", steps=2000, lens={2048: 0.5, 1024: 0.3, 512: 0.2},
                 mix={"text": 0.20, "copy": 0.15, "mqar": 0.10, "kv": 0.10, "niah": 0.35, "vt": 0.10},
                 params=later(8, 64, 96, 4, 3, 0.5)),
        ]),
}

NIAH_W1 = dict(key_kinds={"word1": 1.0}, value_kinds={"word1": 1.0}, max_needles=2, max_queries=2,
               multivalue=0.0, template_p=[0.6, 0.2, 0.1, 0.1])
NIAH_MIX = dict(key_kinds={"word1": 0.4, "adjnoun": 0.6}, value_kinds={"word1": 0.5, "digits7": 0.5},
                max_needles=3, max_queries=2, multivalue=0.0, template_p=[0.6, 0.2, 0.1, 0.1])

# v4 (session 6): the three earlier "main" curricula never formed lookup heads (copy 10%, lookups
# ~0% after 1,500 steps). What measurably works here: repeated random tokens (an induction head in
# ~150 steps -- later found to be a fixed-offset artefact, README Status) and single-token key/value needles on short sequences (TESTBED_NOTES try 2). So:
# repeats first, then RULER-worded needles dominate every phase; text stays at 15-20%.
CURRICULA["v4"] = dict(
    tokens_per_step=4096, warmup=100, lr=2e-3, min_lr_frac=0.1,
    phases=[
        dict(name="rep", steps=200, lens={128: 1.0},
             mix={"rep": 0.6, "niah": 0.25, "text": 0.15}, params={"niah": NIAH_W1, "rep": dict(words=0.5)}),
        dict(name="lookup", steps=800, lens={128: 0.5, 256: 0.5},
             mix={"niah": 0.45, "kv": 0.15, "rep": 0.1, "copy": 0.1, "text": 0.2},
             params={"niah": NIAH_MIX, "kv": KV_EARLY, "rep": dict(words=0.5), "copy": dict(partial=0.3)}),
        dict(name="digits", steps=800, lens={256: 1.0},
             mix={"niah": 0.45, "kv": 0.1, "mqar": 0.05, "vt": 0.05, "copy": 0.1, "rep": 0.05, "text": 0.2},
             params=dict(later(4, 16, 24, 3, 2, 0.4), niah=niah(4, multivalue=0.1, digits=0.7), rep=dict(words=0.5))),
        dict(name="len512", steps=800, lens={512: 0.75, 256: 0.25},
             mix={"niah": 0.45, "kv": 0.1, "mqar": 0.05, "vt": 0.05, "copy": 0.1, "rep": 0.05, "text": 0.2},
             params=dict(later(6, 32, 48, 4, 2, 0.5), niah=niah(6, multivalue=0.1, digits=0.7), rep=dict(words=0.5))),
        dict(name="len1024", steps=1200, lens={1024: 0.7, 512: 0.3},
             mix={"niah": 0.45, "kv": 0.1, "mqar": 0.05, "vt": 0.05, "copy": 0.1, "rep": 0.05, "text": 0.2},
             params=dict(later(8, 48, 64, 4, 3, 0.5), niah=niah(8, multivalue=0.1, digits=0.7), rep=dict(words=0.5))),
    ])

# v5: v4 with a planted previous-token head (train.py --plant) and a longer repeat phase
CURRICULA["v5"] = dict(CURRICULA["v4"], phases=[
    dict(name="rep", steps=400, lens={128: 1.0},
         mix={"rep": 0.5, "niah": 0.3, "kv": 0.1, "text": 0.1},
         params={"niah": NIAH_W1, "kv": KV_EARLY, "rep": dict(words=0.5)}),
    dict(CURRICULA["v4"]["phases"][1], steps=600),
    dict(CURRICULA["v4"]["phases"][2], steps=600)] + CURRICULA["v4"]["phases"][3:])

# v6: v5 after the kv-list tokenization fix, with a longer, repeat-dominated first phase
CURRICULA["v6"] = dict(CURRICULA["v5"], phases=[
    dict(name="rep", steps=800, lens={64: 0.5, 128: 0.5},
         mix={"rep": 0.7, "niah": 0.15, "kv": 0.1, "text": 0.05},
         params={"niah": NIAH_W1, "kv": KV_EARLY, "rep": dict(words=0.3)})] + CURRICULA["v5"]["phases"][1:])

# TESTBED_NOTES try 2, replicated (second-seed hedge): single-token needles and lists at 128 first
CURRICULA["v4b"] = dict(CURRICULA["v4"], phases=[
    dict(name="words", steps=600, lens={128: 1.0},
         mix={"niah": 0.35, "kv": 0.35, "copy": 0.2, "text": 0.1},
         params={"niah": NIAH_W1, "kv": KV_EARLY, "copy": dict(partial=0.2)}),
    dict(CURRICULA["v4"]["phases"][1], steps=400)] + CURRICULA["v4"]["phases"][2:])

CURRICULA["diag_rep"] = dict(tokens_per_step=4096, warmup=50, lr=1e-3, min_lr_frac=0.1, phases=[
    dict(name="rep", steps=400, lens={128: 1.0}, mix={"rep": 1.0}, params={"rep": dict(words=0.0)})])

# warm start: pure repeats with the planted head until a content-based induction head exists
# (then continue a lookup curriculum from its checkpoint)
CURRICULA["rep_warm"] = dict(tokens_per_step=4096, warmup=50, lr=2e-3, min_lr_frac=0.1, phases=[
    dict(name="rep", steps=3000, lens={64: 0.7, 128: 0.3}, mix={"rep": 1.0}, params={"rep": dict(words=0.3)})])

# v7 (session 7): starts from the planted induction circuit (train.py --plant induction, plant.py),
# which copies repeated random tokens at 75-84% at step 0. So no repeat warm-up: lookups at once,
# short phases, then the evaluation lengths.
# Peak lr 5e-4: measured at step 100, lr 3e-3 wiped the circuit out (copy 66% -> 6%), 1e-3 kept
# copy at 39%, 5e-4 at 53% with a lower loss (runs p7a/p7b/p7c of session 7).
CURRICULA["v7"] = dict(
    tokens_per_step=4096, warmup=100, lr=5e-4, min_lr_frac=0.1,
    phases=[
        dict(name="lookup", steps=300, lens={128: 0.5, 256: 0.5},
             mix={"niah": 0.35, "kv": 0.15, "mqar": 0.1, "copy": 0.1, "rep": 0.1, "text": 0.2},
             params={"niah": NIAH_MIX, "kv": KV_EARLY, "mqar": MQAR_EARLY, "rep": dict(words=0.5),
                     "copy": dict(partial=0.3)}),
        dict(CURRICULA["v4"]["phases"][2], steps=400),
        dict(CURRICULA["v4"]["phases"][3], steps=500),
        dict(CURRICULA["v4"]["phases"][4], steps=800),
    ])

# continuation of a committed v7 model to 2,048 tokens (train.py --init-from testbed/models/v7s1):
# 800 steps, ~3 s per step on one core; gave testbed/models/v7s1_2048 (7-digit needle at 2,048: 100%).
CURRICULA["v7_len2048"] = dict(
    tokens_per_step=4096, warmup=50, lr=3e-4, min_lr_frac=0.1,
    phases=[dict(CURRICULA["v4"]["phases"][4], name="len2048", steps=800, lens={2048: 0.5, 1024: 0.3, 512: 0.2},
                 params=dict(later(8, 64, 96, 4, 3, 0.5), niah=niah(8, multivalue=0.1, digits=0.7), rep=dict(words=0.5)))])

# v8 (issue 27): the shape of real models (head_dim 64, 8 layers, 6 query / 3 KV heads, hidden 384:
# train.py --layers 8 --hidden 384 --ffn 1024 --heads 6 --kv-heads 3) on v7's phases plus a
# 2,048-token phase, with
#  * question-side retrieval: the key tokens of a question's first mention (after the first) are
#    answers (qkey_w, tasks.question_pieces), in needles and key: value lists, so the question's own
#    tokens must attend to the needle; multi-token keys dominate so that there is something to
#    retrieve;
#  * multi-needle / multi-question: up to 8 needles and 4 questions per sequence (each answer right
#    after its question), and RULER's multikey_2 format (needle_hay: a haystack made only of needle
#    lines, every line a distractor), besides dense recall (mqar);
#  * streamed text (tasks.gen_stream): book / essay windows starting at any token, as the perplexity
#    evals cut them, half of the text share.
# Phase 1 keeps v7's lesson: one-hop lookups of single-token values on 128-256 tokens first.
def niah_v8(max_needles, digits=0.7, early=False, needle_hay=0.2):
    base = dict(NIAH_MIX) if early else niah(max_needles, multivalue=0.1, digits=digits)
    return dict(base, key_kinds={"word1": 0.2, "adjnoun": 0.8}, max_needles=max_needles, max_queries=4,
                qkey_w=2.0, needle_hay=needle_hay)


def later_v8(max_needles, max_pairs, mqar_pairs, hops, chains, partial):
    return dict(later(max_needles, max_pairs, mqar_pairs, hops, chains, partial), niah=niah_v8(max_needles),
                kv=dict(kv(max_pairs), qkey_w=2.0), rep=dict(words=0.5), stream={})


V8_MIX = {"niah": 0.45, "kv": 0.1, "mqar": 0.05, "vt": 0.05, "copy": 0.1, "rep": 0.05, "text": 0.08, "stream": 0.12}
V8_LOOKUP_MIX = {"niah": 0.35, "kv": 0.15, "mqar": 0.1, "copy": 0.1, "rep": 0.1, "text": 0.1, "stream": 0.1}
CURRICULA["v8"] = dict(
    tokens_per_step=4096, warmup=100, lr=5e-4, min_lr_frac=0.1,
    phases=[
        dict(CURRICULA["v7"]["phases"][0], mix=V8_LOOKUP_MIX,
             params=dict(CURRICULA["v7"]["phases"][0]["params"], niah=niah_v8(3, early=True, needle_hay=0.1),
                         stream={})),
        dict(name="digits", steps=400, lens={256: 1.0}, mix=V8_MIX, params=later_v8(4, 16, 24, 3, 2, 0.4)),
        dict(name="len512", steps=500, lens={512: 0.75, 256: 0.25}, mix=V8_MIX, params=later_v8(6, 32, 48, 4, 2, 0.5)),
        dict(name="len1024", steps=800, lens={1024: 0.7, 512: 0.3}, mix=V8_MIX, params=later_v8(8, 48, 64, 4, 3, 0.5)),
        dict(name="len2048", steps=600, lens={2048: 0.5, 1024: 0.3, 512: 0.2}, mix=V8_MIX,
             params=later_v8(8, 64, 96, 4, 3, 0.5)),
    ])

# a few-minute pipeline check: same phases, tiny step counts
CURRICULA["tiny"] = dict(CURRICULA["v7"], warmup=20, phases=[
    dict(p, steps=s) for p, s in zip(CURRICULA["v7"]["phases"], [60, 30, 20, 10])])


# the same for v8's five phases (every v8 task and length up to 2,048), in 2,048-token steps: at the
# v8 shape one 4,096-token step takes ~15 s on one core, so this is ~3 minutes plus the evals
CURRICULA["tiny_v8"] = dict(CURRICULA["v8"], warmup=5, tokens_per_step=2048, phases=[
    dict(p, steps=s) for p, s in zip(CURRICULA["v8"]["phases"], [4, 3, 3, 2, 2])])


def scaled(cur, x):
    """The curriculum with every phase's step count multiplied by x (rounded; warmup unchanged):
    the same phases, mixes and lengths, x times the tokens (train.py --steps-scale, used on a GPU)."""
    if x == 1.0:
        return cur
    return dict(cur, phases=[dict(p, steps=max(1, int(round(p["steps"] * x)))) for p in cur["phases"]])


def total_steps(cur):
    return sum(p["steps"] for p in cur["phases"])


def phase_at(cur, step):
    """(phase index, phase dict) for a 0-based step; past the end -> the last phase."""
    s = 0
    for i, p in enumerate(cur["phases"]):
        s += p["steps"]
        if step < s:
            return i, p
    return len(cur["phases"]) - 1, cur["phases"][-1]


def phase_end_steps(cur):
    out, s = [], 0
    for p in cur["phases"]:
        s += p["steps"]
        out.append(s)
    return out
