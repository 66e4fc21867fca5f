// Benchmarks of `kvshrink serve` over loopback HTTP (no npm packages: node's fetch). Not run by
// ctest; results and command lines are in the "Server" section of BENCHMARKS.md.
//
//   node tests/server/bench/bench.mjs throughput --bin build/tools/kvshrink --model smollm2-q8.gguf \
//        [--ctx 2048] [--new 64] [--n 1,4,16] [--modes full,snapkv:0.25] [--reps 3] [-t 2] [--kv-type q8_0]
//     aggregate decode tokens/s of N sequences decoding together, each on its own stored context
//     of --ctx random tokens (created first), full cache vs compressed; with the median rep's time
//     inside batched steps, their count and ms per step (from /metrics: step_s, steps, ms_per_step).
//     --roofline: the memory bound beside each row — `kvshrink bench-memory` (the same threads) read
//     before and after the row's reps (bw_before, bw_after, GB/s), the bytes a step reads (the
//     weights, /v1/models' meta.weight_bytes, + N x one context's KV bytes held), the tokens/s those
//     bytes allow at the mean of the two readings (bound_tps) and the share of it decoded (and the
//     share at the higher reading, share_at_higher: the readings can differ by 2x on a shared VM).
//     With KVS_SECTION_PROFILE=FILE in the environment the server times its parallel sections
//     (src/core/section_profile.h) and the bench clears them before each row's reps: FILE then
//     holds the last row's decode rounds (run one mode and one --n for a clean profile).
//   node tests/server/bench/bench.mjs memory --bin ... --model ... --cap 1G [--ctx 8192] [--k 12] \
//        [--modes full,snapkv:0.25]
//     K concurrent requests, each an 8k-token prompt (+ 32 new tokens), under --max-kv-bytes CAP:
//     the most sequences decoding at the same time (sampled from /metrics), all answered, pool
//     high-water under the cap.
//   node tests/server/bench/bench.mjs capacity --bin ... --model ... --cap 1G [--ctx 8192] [--new 32] \
//        [--modes full,snapkv:0.25] [--max 32]
//     the memory payoff: stores --ctx-token contexts under --max-kv-bytes CAP until the server refuses
//     the next one (429 after a 5 s queue timeout), then asks one question on every stored context at
//     once: how many contexts fit, how many sequences decode together, their aggregate tokens/s.
//   node tests/server/bench/bench.mjs load --bin ... --model ... [--clients 32] [--seconds 120] [--cap 2G]
//     32 clients for 2 minutes mixing context creation, questions on shared contexts and plain
//     chat: status counts (no 5xx), latency percentiles, throughput, KV high-water vs the cap.
import { execFileSync, spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';

const args = process.argv.slice(2);
const cmd = args[0];
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
};
const BIN = opt('--bin', 'build/tools/kvshrink');
const MODEL = opt('--model');
const THREADS = opt('-t', '2');
const KV_TYPE = opt('--kv-type');  // f16 (the server's default), f32, q8_0 or q4_0: passed to the server
const ROOFLINE = args.includes('--roofline');

// The machine's read bandwidth now, GB/s (kvshrink bench-memory: median of its passes over 256 MiB).
function readBandwidth() {
  const out = execFileSync(BIN, ['bench-memory', '-t', THREADS, '--reps', '3', '--json'], { encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').pop()).read_gbps_median;
}

function startServer(extra) {
  return new Promise((resolve, reject) => {
    const a = ['serve', '-m', MODEL, '--port', '0', '-t', THREADS, ...(KV_TYPE ? ['--kv-type', KV_TYPE] : []), ...extra];
    const proc = spawn(BIN, a, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    proc.stderr.on('data', (d) => {
      err += d.toString();
      const m = err.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) resolve({ proc, url: m[1], cmdline: `kvshrink ${a.join(' ')}` });
    });
    proc.on('exit', (c) => reject(new Error(`server exited ${c}: ${err}`)));
  });
}
const stop = (s) => new Promise((r) => { s.proc.on('exit', r); s.proc.kill('SIGTERM'); });

async function post(url, path, body) {
  const t0 = performance.now();
  const r = await fetch(url + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, ms: performance.now() - t0 };
}

async function metrics(url) {
  const text = await (await fetch(url + '/metrics')).text();
  const m = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return m;
}

// Deterministic token ids (a linear congruential generator), avoiding the first 100 ids (specials).
function randomTokens(n, seed, vocab) {
  let x = BigInt(seed) * 6364136223846793005n + 1442695040888963407n;
  const out = [];
  for (let i = 0; i < n; ++i) {
    x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
    out.push(100 + Number((x >> 33n) % BigInt(vocab - 100)));
  }
  return out;
}

function compression(mode) {
  if (mode === 'full') return undefined;
  const [press, keep] = mode.split(':');
  return { press, keep: Number(keep) };
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};
const median = (xs) => pct(xs, 50);

async function vocabOf(url) {
  const m = await (await fetch(url + '/v1/models')).json();
  return m.data[0].meta.n_vocab;
}

async function throughput() {
  const ctx = Number(opt('--ctx', '2048'));
  const nnew = Number(opt('--new', '64'));
  const ns = opt('--n', '1,4,16').split(',').map(Number);
  const modes = opt('--modes', 'full,snapkv:0.25').split(',');
  const reps = Number(opt('--reps', '3'));
  const maxN = Math.max(...ns);
  const s = await startServer(['--parallel', String(maxN), '--ctx-size', String(ctx + nnew + 16),
    '--max-prompt-tokens', String(ctx + 16), '--max-tokens', String(nnew), '--prefill-chunk', '512']);
  console.log(`server: ${s.cmdline}`);
  const vocab = await vocabOf(s.url);
  const weightBytes = (await (await fetch(s.url + '/v1/models')).json()).data[0].meta.weight_bytes;
  const rows = [];
  try {
    for (const mode of modes) {
      const ids = [];
      const t0 = performance.now();
      for (let i = 0; i < maxN; ++i) {
        const r = await post(s.url, '/v1/contexts', { tokens: randomTokens(ctx, 1000 + i, vocab), kv_compression: compression(mode) });
        if (r.status !== 200) throw new Error(`context: ${r.status} ${JSON.stringify(r.json)}`);
        ids.push(r.json);
      }
      const prefillS = (performance.now() - t0) / 1000;
      console.log(`${mode}: ${maxN} contexts of ${ctx} tokens in ${prefillS.toFixed(1)} s; held ${ids[0].kv_bytes_held} of ${ids[0].kv_bytes_full} B each (keep ${ids[0].keep_ratio.toFixed(3)})`);
      // One warm-up round.
      await post(s.url, '/v1/completions', { context_id: ids[0].id, prompt: [200], max_tokens: 8, ignore_eos: true, temperature: 0 });
      for (const n of ns) {
        const walls = [];
        const perSeq = [];
        const inStep = [];  // per rep: seconds inside batched steps, steps, decode rows (from /metrics)
        const bwBefore = ROOFLINE ? readBandwidth() : null;
        // With KVS_SECTION_PROFILE set (the server inherits it), the server's section profile is
        // cleared here, so that the report it writes at exit holds the last row's decode rounds only.
        if (process.env.KVS_SECTION_PROFILE) s.proc.kill('SIGUSR1');
        for (let rep = 0; rep < reps; ++rep) {
          const m0 = await metrics(s.url);
          const t = performance.now();
          const rs = await Promise.all(ids.slice(0, n).map((c) => post(s.url, '/v1/completions', {
            context_id: c.id, prompt: [200 + rep], max_tokens: nnew, ignore_eos: true, temperature: 0,
          })));
          const wall = (performance.now() - t) / 1000;
          const m1 = await metrics(s.url);
          const d = (k) => m1[k] - m0[k];
          inStep.push({ s: d('kvshrink_batch_step_seconds_total'), steps: d('kvshrink_batch_steps_total'),
            rows: d('kvshrink_batch_decode_rows_total') });
          for (const r of rs) {
            if (r.status !== 200 || r.json.usage.completion_tokens !== nnew) throw new Error(`answer: ${r.status} ${JSON.stringify(r.json)}`);
            perSeq.push(r.json.timings.decode_tokens_per_second);
          }
          walls.push(wall);
        }
        const wall = median(walls);
        // Where the wall went: the median rep's time inside batched forward steps, their count and
        // the decode rows they fed (the rest is HTTP, scheduling, sampling and the steps' ramp).
        const st = inStep[walls.indexOf(wall)] ?? inStep[0];
        const row = { mode, n, ctx, new: nnew, wall_s: wall, aggregate_tps: (n * nnew) / wall, per_seq_tps: median(perSeq),
          kv_bytes_per_ctx: ids[0].kv_bytes_held, step_s: st.s, steps: st.steps, decode_rows: st.rows,
          ms_per_step: (1000 * st.s) / st.steps };
        if (ROOFLINE) {
          // The bound: a step reads every weight once and each sequence's KV (as held when created;
          // the --new tokens decoded add a few percent).
          row.bw_before = bwBefore;
          row.bw_after = readBandwidth();
          row.bytes_per_step = weightBytes + n * ids[0].kv_bytes_held;
          row.bound_tps = (n * ((row.bw_before + row.bw_after) / 2) * 1e9) / row.bytes_per_step;
          row.share = row.aggregate_tps / row.bound_tps;
          // This VM's bandwidth swings by 2x within minutes; one low reading lowers the mean and
          // flatters the share. The share at the higher of the two readings is the stricter one.
          row.share_at_higher = (row.aggregate_tps * row.bytes_per_step) / (n * Math.max(row.bw_before, row.bw_after) * 1e9);
        }
        rows.push(row);
        console.log(JSON.stringify(row));
      }
      for (const c of ids) await fetch(`${s.url}/v1/contexts/${c.id}`, { method: 'DELETE' });
    }
  } finally {
    await stop(s);
  }
  const roof = (r) => (ROOFLINE ? ` ${(r.bytes_per_step / 1e6).toFixed(1)} MB | ${r.bw_before.toFixed(1)} / ${r.bw_after.toFixed(1)} | ${r.bound_tps.toFixed(0)} | ${(100 * r.share).toFixed(0)}% | ${(100 * r.share_at_higher).toFixed(0)}% |` : '');
  console.log(`\n| mode | sequences | aggregate decode tok/s | per-sequence tok/s | wall (s) | KV per context |${ROOFLINE ? ' bytes per step | GB/s before / after | bound tok/s | share | share at the higher reading |' : ''}`);
  console.log(`|---|---|---|---|---|---|${ROOFLINE ? '---|---|---|---|---|' : ''}`);
  for (const r of rows)
    console.log(`| ${r.mode} | ${r.n} | ${r.aggregate_tps.toFixed(1)} | ${r.per_seq_tps.toFixed(1)} | ${r.wall_s.toFixed(2)} | ${(r.kv_bytes_per_ctx / 2 ** 20).toFixed(1)} MiB |${roof(r)}`);
}

async function memory() {
  const cap = opt('--cap', '1G');
  const ctx = Number(opt('--ctx', '8192'));
  const k = Number(opt('--k', '12'));
  const nnew = Number(opt('--new', '32'));
  const modes = opt('--modes', 'full,snapkv:0.25').split(',');
  for (const mode of modes) {
    const s = await startServer(['--max-kv-bytes', cap, '--parallel', String(k), '--max-queue', String(k),
      '--queue-timeout', '3600', '--ctx-size', String(ctx + nnew + 16), '--max-prompt-tokens', String(ctx + 16),
      '--max-tokens', String(nnew), '--prefill-chunk', '512']);
    console.log(`server: ${s.cmdline}`);
    try {
      const vocab = await vocabOf(s.url);
      let maxDecoding = 0, maxRunning = 0, hw = 0, done = false;
      const sampler = (async () => {
        while (!done) {
          const m = await metrics(s.url);
          maxDecoding = Math.max(maxDecoding, m.kvshrink_sequences_decoding);
          maxRunning = Math.max(maxRunning, m.kvshrink_sequences_running);
          hw = Math.max(hw, m.kvshrink_kv_bytes_high_water);
          await new Promise((r) => setTimeout(r, 50));
        }
      })();
      const t0 = performance.now();
      const rs = await Promise.all([...Array(k).keys()].map((i) => post(s.url, '/v1/completions', {
        prompt: randomTokens(ctx, 5000 + i, vocab), max_tokens: nnew, ignore_eos: true, temperature: 0,
        kv_compression: compression(mode),
      })));
      done = true;
      await sampler;
      const m = await metrics(s.url);
      const ok = rs.filter((r) => r.status === 200).length;
      const row = { mode, cap, ctx, requests: k, answered: ok, statuses: [...new Set(rs.map((r) => r.status))],
        max_decoding_together: maxDecoding, max_running_together: maxRunning,
        kv_high_water: m.kvshrink_kv_bytes_high_water, kv_cap: m.kvshrink_kv_bytes_cap,
        kv_per_sequence_end: rs[0].json?.usage?.kv_bytes_held, wall_s: (performance.now() - t0) / 1000 };
      console.log(JSON.stringify(row));
    } finally {
      await stop(s);
    }
  }
}

async function capacity() {
  const cap = opt('--cap', '1G');
  const ctx = Number(opt('--ctx', '8192'));
  const nnew = Number(opt('--new', '32'));
  const most = Number(opt('--max', '32'));
  const modes = opt('--modes', 'full,snapkv:0.25').split(',');
  const rows = [];
  for (const mode of modes) {
    const s = await startServer(['--max-kv-bytes', cap, '--parallel', String(most), '--max-queue', String(most),
      '--queue-timeout', '5', '--ctx-size', String(ctx + nnew + 16), '--max-prompt-tokens', String(ctx + 16),
      '--max-tokens', String(nnew), '--prefill-chunk', '512']);
    console.log(`server: ${s.cmdline}`);
    try {
      const vocab = await vocabOf(s.url);
      const ids = [];
      let refusal = null;
      const t0 = performance.now();
      while (ids.length < most) {
        const r = await post(s.url, '/v1/contexts', { tokens: randomTokens(ctx, 9000 + ids.length, vocab), kv_compression: compression(mode) });
        if (r.status !== 200) { refusal = { status: r.status, code: r.json?.error?.code }; break; }
        ids.push(r.json);
        console.log(`${mode}: context ${ids.length}: ${r.json.tokens} tokens, held ${r.json.kv_bytes_held} B (${(r.ms / 1000).toFixed(1)} s)`);
      }
      const createS = (performance.now() - t0) / 1000;
      let maxDecoding = 0, done = false;
      const sampler = (async () => {
        while (!done) {
          const m = await metrics(s.url);
          maxDecoding = Math.max(maxDecoding, m.kvshrink_sequences_decoding);
          await new Promise((r) => setTimeout(r, 20));
        }
      })();
      const t1 = performance.now();
      const rs = await Promise.all(ids.map((c, i) => post(s.url, '/v1/completions', {
        context_id: c.id, prompt: [300 + i], max_tokens: nnew, ignore_eos: true, temperature: 0 })));
      const wall = (performance.now() - t1) / 1000;
      done = true;
      await sampler;
      const m = await metrics(s.url);
      const answered = rs.filter((r) => r.status === 200).length;
      const row = { mode, cap, ctx, contexts_stored: ids.length, next_refused: refusal, create_s: createS,
        kv_held_per_context: ids[0]?.kv_bytes_held, kv_contexts_total: m.kvshrink_kv_bytes_contexts,
        questions: ids.length, answered, statuses: [...new Set(rs.map((r) => r.status))], max_decoding_together: maxDecoding,
        answer_wall_s: wall, aggregate_tps: (answered * nnew) / wall,
        kv_high_water: m.kvshrink_kv_bytes_high_water, kv_cap: m.kvshrink_kv_bytes_cap };
      rows.push(row);
      console.log(JSON.stringify(row));
    } finally {
      await stop(s);
    }
  }
  console.log(`\n| mode | ${ctx}-token contexts stored under ${cap} | KV per context | decoding together | aggregate tok/s | KV high-water / cap |`);
  console.log('|---|---|---|---|---|---|');
  for (const r of rows)
    console.log(`| ${r.mode} | ${r.contexts_stored} (next: ${r.next_refused ? r.next_refused.status + ' ' + r.next_refused.code : 'not tried'}) | ${(r.kv_held_per_context / 2 ** 20).toFixed(1)} MiB | ${r.max_decoding_together} | ${r.aggregate_tps.toFixed(1)} | ${(r.kv_high_water / 2 ** 20).toFixed(0)} / ${(r.kv_cap / 2 ** 20).toFixed(0)} MiB |`);
}

async function load() {
  const clients = Number(opt('--clients', '32'));
  const seconds = Number(opt('--seconds', '120'));
  const cap = opt('--cap', '2G');
  const s = await startServer(['--max-kv-bytes', cap, '--parallel', '16', '--max-queue', '64', '--queue-timeout', '60',
    '--max-tokens', '64', '--prefill-chunk', '256']);
  console.log(`server: ${s.cmdline}`);
  const vocab = await vocabOf(s.url);
  const lat = { context: [], question: [], chat: [] };
  const status = {};
  let tokens = 0;
  const shared = [];
  const tEnd = performance.now() + seconds * 1000;
  const count = (kind, r) => {
    status[r.status] = (status[r.status] || 0) + 1;
    if (r.status === 200) {
      lat[kind].push(r.ms);
      tokens += r.json?.usage?.completion_tokens || 0;
    }
  };
  // Two shared contexts everyone asks about (created before the clients start).
  for (let i = 0; i < 2; ++i) {
    const r = await post(s.url, '/v1/contexts', { tokens: randomTokens(1024, 77 + i, vocab), kv_compression: { press: 'snapkv', keep: 0.25 } });
    shared.push(r.json.id);
  }
  let maxKv = 0, done = false;
  const sampler = (async () => {
    while (!done) {
      const m = await metrics(s.url);
      maxKv = Math.max(maxKv, m.kvshrink_kv_bytes);
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  const t0 = performance.now();
  const client = async (c) => {
    let i = 0;
    while (performance.now() < tEnd) {
      const kind = (c + i++) % 10;
      if (kind === 0) {
        // Create a context (512 tokens, compressed), ask once, delete it.
        const r = await post(s.url, '/v1/contexts', { tokens: randomTokens(512, c * 1000 + i, vocab), kv_compression: { press: 'knorm', keep: 0.5 } });
        count('context', r);
        if (r.status === 200) {
          count('question', await post(s.url, '/v1/completions', { context_id: r.json.id, prompt: [300], max_tokens: 16 }));
          await fetch(`${s.url}/v1/contexts/${r.json.id}`, { method: 'DELETE' });
        }
      } else if (kind < 6) {
        count('question', await post(s.url, '/v1/completions', { context_id: shared[i % 2], prompt: [400 + c], max_tokens: 32, ignore_eos: true }));
      } else {
        count('chat', await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: `Tell me a story number ${c}-${i}.` }], max_tokens: 32, ignore_eos: true }));
      }
    }
  };
  await Promise.all([...Array(clients).keys()].map(client));
  const wall = (performance.now() - t0) / 1000;
  done = true;
  await sampler;
  const m = await metrics(s.url);
  await stop(s);
  const total = Object.values(status).reduce((a, b) => a + b, 0);
  console.log(JSON.stringify({ clients, wall_s: wall, requests: total, status, generated_tokens: tokens,
    requests_per_s: total / wall, tokens_per_s: tokens / wall, kv_cap: m.kvshrink_kv_bytes_cap,
    kv_high_water: m.kvshrink_kv_bytes_high_water, kv_max_sampled: maxKv }));
  console.log('\n| kind | count | p50 ms | p90 ms | p99 ms | max ms |');
  console.log('|---|---|---|---|---|---|');
  for (const [k, xs] of Object.entries(lat))
    console.log(`| ${k} | ${xs.length} | ${pct(xs, 50).toFixed(0)} | ${pct(xs, 90).toFixed(0)} | ${pct(xs, 99).toFixed(0)} | ${Math.max(...xs).toFixed(0)} |`);
}

const run = { throughput, memory, capacity, load }[cmd];
if (!run || !MODEL) {
  console.error('usage: bench.mjs throughput|memory|capacity|load --bin KVSHRINK --model MODEL [options] (see the file header)');
  process.exit(2);
}
run().catch((e) => { console.error(e); process.exit(1); });
