// `kvshrink serve` driven by the official `openai` npm client (a client nobody here wrote):
// completions, chat, streaming, per-request kv_compression, compressed contexts (raw fetch for
// /v1/contexts, the client for questions on them), error handling, authentication and
// cancellation. Run by ctest (tests.cmake): KVSHRINK_BIN and KVSHRINK_MODEL name the binary and
// the model; every server listens on a free loopback port.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { BIN, MODEL, startServer } from './server_process.mjs';

// About 130 tokens: compression at keep 0.5 frees whole pages (32 tokens per page).
const STORY =
  'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her ' +
  'friends. One day, she saw a big red ball under a tree. She wanted to play with it, but it was too high. ' +
  'Lily asked her mom for help. Her mom smiled and took the ball down from the tree. Lily was very happy. ' +
  'She played with the ball all day long, and when the sun went down, she went home and had a warm bath.';

// SIGTERM; resolves with how the process ended ({code, signal}: a graceful stop exits with code 0).
function stopServer(s) {
  return new Promise((resolve) => {
    if (!s || s.proc.exitCode !== null) return resolve({ code: s?.proc.exitCode ?? null, signal: null });
    s.proc.on('exit', (code, signal) => resolve({ code, signal }));
    s.proc.kill('SIGTERM');
  });
}

async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  for (const line of text.split('\n')) {
    if (line.startsWith(name + ' ')) return Number(line.slice(name.length + 1));
  }
  return NaN;
}

// `kvshrink generate` (greedy, 2 threads) on the same prompt: the independent reference for the
// server's prompt assembly and detokenization. The CLI echoes a completion's prompt and ends with
// a newline.
function cliGenerate(prompt, args) {
  const dir = mkdtempSync(join(tmpdir(), 'kvs-js-'));
  try {
    const file = join(dir, 'prompt.txt');
    writeFileSync(file, prompt);
    return execFileSync(BIN, ['generate', '-m', MODEL, '-t', '2', '-q', '--temp', '0', '-f', file, ...args],
                        { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

let srv;
let client;
before(async () => {
  assert.ok(BIN && MODEL, 'KVSHRINK_BIN and KVSHRINK_MODEL must be set');
  // A 260K-parameter model outruns any client: pace the steps so that a stream can be aborted
  // half way.
  srv = await startServer(['--step-delay-ms', '2']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});
after(async () => {
  await stopServer(srv);
});

test('models.list names the served model', async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, 'model');
  const one = await client.models.retrieve(models.data[0].id);
  assert.equal(one.id, models.data[0].id);
});

test('completions: greedy, the CLI\'s text, usage with KV figures', async () => {
  const req = { model: 'any', prompt: STORY, max_tokens: 12, temperature: 0 };
  const a = await client.completions.create(req);
  assert.equal(a.object, 'text_completion');
  assert.equal(typeof a.choices[0].text, 'string');
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 12);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 12);
  assert.ok(a.usage.kv_bytes_held > 0);
  const cli = cliGenerate(STORY, ['-n', '12']);
  assert.ok(cli.startsWith(STORY), cli);
  assert.equal(a.choices[0].text, cli.slice(STORY.length, -1));
  assert.ok(a.choices[0].text.length > 0);
});

test('completions with kv_compression (an extra body field): exact keep ratio, the CLI\'s text', async () => {
  const r = await client.completions.create({
    model: 'any', prompt: STORY, max_tokens: 8, temperature: 0, ignore_eos: true,
    kv_compression: { press: 'snapkv', keep: 0.5, options: { window_size: 8 } },
  });
  assert.equal(r.usage.kv_press, 'snapkv');
  assert.ok(r.usage.kv_bytes_held < r.usage.kv_bytes_full);
  // SnapKV keeps round(0.5 (n - 1)) of the n - 1 compressed prompt tokens in every head (uniform
  // allocator, no sinks or window); the last prompt token and 7 of the 8 generated tokens follow:
  // K + 8 of the n + 7 positions are held at the end.
  const n = r.usage.prompt_tokens;
  const K = Math.round(0.5 * (n - 1));
  assert.equal(r.usage.kv_keep_ratio, (K + 8) / (n + 7));
  const cli = cliGenerate(STORY, ['-n', '8', '--ignore-eos', '--press', 'snapkv', '--keep', '0.5', '--opt', 'window_size=8']);
  assert.equal(r.choices[0].text, cli.slice(STORY.length, -1));
});

test('chat completions, and the same answer streamed', async () => {
  const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: STORY }];
  const full = await client.chat.completions.create({ model: 'any', messages, max_tokens: 10, temperature: 0, ignore_eos: true });
  assert.equal(full.object, 'chat.completion');
  assert.equal(full.choices[0].message.role, 'assistant');
  assert.equal(full.choices[0].message.content + '\n',
               cliGenerate(STORY, ['-n', '10', '--ignore-eos', '--chat', '--system', 'You tell stories.']));
  const stream = await client.chat.completions.create({
    model: 'any', messages, max_tokens: 10, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 10);
});

test('streamed completion with a stop string', async () => {
  const stream = await client.completions.create({
    model: 'any', prompt: STORY, max_tokens: 60, temperature: 0, stop: ['.'], stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.ok(!text.includes('.'), text);
  assert.equal(finish, 'stop');
});

test('contexts: create with fetch, ask with the client, delete', async () => {
  const created = await fetch(`${srv.url}/v1/contexts`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'user', content: STORY }],
      kv_compression: { press: 'knorm', keep: 0.5 },
    }),
  });
  assert.equal(created.status, 200);
  const ctx = await created.json();
  assert.equal(ctx.object, 'context');
  assert.equal(ctx.format, 'chat');
  assert.ok(ctx.kv_bytes_held < ctx.kv_bytes_full);
  const ask = () => client.chat.completions.create({
    model: 'any', context_id: ctx.id, messages: [{ role: 'user', content: 'Where did Lily play?' }],
    max_tokens: 6, temperature: 0,
  });
  const a1 = await ask();
  const a2 = await ask();
  assert.equal(a1.choices[0].message.content, a2.choices[0].message.content);
  assert.equal(a1.usage.prompt_tokens_details.cached_tokens, ctx.tokens);
  assert.equal(a1.usage.kv_press, 'knorm');
  const got = await (await fetch(`${srv.url}/v1/contexts/${ctx.id}`)).json();
  assert.equal(got.id, ctx.id);
  const list = await (await fetch(`${srv.url}/v1/contexts`)).json();
  assert.ok(list.data.some((c) => c.id === ctx.id));
  const del = await fetch(`${srv.url}/v1/contexts/${ctx.id}`, { method: 'DELETE' });
  assert.equal((await del.json()).deleted, true);
  assert.equal((await fetch(`${srv.url}/v1/contexts/${ctx.id}`)).status, 404);
});

test('errors come back as the client\'s typed errors', async () => {
  await assert.rejects(
    client.completions.create({ model: 'any', prompt: 'x', max_tokens: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'max_tokens',
  );
  await assert.rejects(
    client.completions.create({ model: 'any', prompt: 'x y', kv_compression: { press: 'no_such_press', keep: 0.5 } }),
    (e) => e instanceof OpenAI.BadRequestError && /no_such_press/.test(e.message),
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'any', messages: [{ role: 'user', content: 'x' }], temperature: 9 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature',
  );
  await assert.rejects(
    client.completions.create({ model: 'any', prompt: 'x', context_id: 'ctx_missing' }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'context_not_found',
  );
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e instanceof OpenAI.NotFoundError);
  // Malformed JSON through fetch: 400 in the same shape.
  const r = await fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"messages": [' });
  assert.equal(r.status, 400);
  const j = await r.json();
  assert.equal(j.error.type, 'invalid_request_error');
  // fetch's default text/plain body (what a cross-site page can send without a preflight): 415.
  const t = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', body: '{"messages": []}' });
  assert.equal(t.status, 415);
  assert.equal((await t.json()).error.code, 'unsupported_media_type');
  // The server is still up.
  assert.equal((await fetch(`${srv.url}/health`)).status, 200);
});

test('aborting a stream cancels the sequence and frees its KV pages', async () => {
  const before = await metric(srv.url, 'kvshrink_cancelled_total');
  const ac = new AbortController();
  const stream = await client.completions.create(
    { model: 'any', prompt: STORY, max_tokens: 400, stream: true, ignore_eos: true },
    { signal: ac.signal },
  );
  // The client's stream ends quietly on abort (it does not throw).
  let n = 0;
  for await (const chunk of stream) {
    if (++n === 3) ac.abort();
  }
  assert.ok(n < 50, `the stream went on after the abort (${n} chunks)`);
  let running = 1;
  for (let i = 0; i < 200 && running !== 0; ++i) {
    running = await metric(srv.url, 'kvshrink_sequences_running');
    if (running !== 0) await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(running, 0);
  assert.equal(await metric(srv.url, 'kvshrink_cancelled_total'), before + 1);
  assert.ok((await metric(srv.url, 'kvshrink_generated_tokens_total')) > 0);
  assert.equal(await metric(srv.url, 'kvshrink_kv_bytes'), 0);
});

test('an API key is required when set', async () => {
  const s = await startServer(['--api-key', 'test-key-123']);
  try {
    const bad = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    const good = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'test-key-123', maxRetries: 0 });
    const r = await good.completions.create({ model: 'any', prompt: 'Hi', max_tokens: 2 });
    assert.equal(r.usage.completion_tokens <= 2, true);
  } finally {
    // SIGTERM stops the server (exit code 0), it does not kill it.
    assert.deepEqual(await stopServer(s), { code: 0, signal: null });
  }
});

test('SIGTERM: a stream gets an error event and the end, a plain request 503, the process exits 0', async () => {
  const s = await startServer(['--step-delay-ms', '20', '--shutdown-grace', '1']);
  const c = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const stream = await c.completions.create({ model: 'any', prompt: STORY, max_tokens: 400, stream: true, ignore_eos: true });
  // Settled at once into a value: the plain request may be refused before the stream's error
  // arrives, and a rejection nobody awaits yet fails node's test runner (unhandledRejection).
  const plain = c.completions.create({ model: 'any', prompt: STORY, max_tokens: 400, ignore_eos: true })
    .then((r) => r, (e) => e);
  const t0 = Date.now();
  let n = 0;
  const exited = new Promise((resolve) => s.proc.on('exit', (code, signal) => resolve({ code, signal })));
  await assert.rejects(async () => {
    for await (const chunk of stream) {
      if (++n === 3) s.proc.kill('SIGTERM');
    }
  }, (e) => e instanceof OpenAI.APIError && /shutting down/.test(e.message));
  const refused = await plain;
  assert.ok(refused instanceof OpenAI.APIError && refused.status === 503, `the plain request got ${refused}`);
  assert.deepEqual(await exited, { code: 0, signal: null });
  assert.ok(Date.now() - t0 < 6000, `exit took ${Date.now() - t0} ms with a 1 s grace`);
  assert.ok(n < 100, 'the stream went on past the grace period');
});

test('an empty API key is refused at start', async () => {
  await assert.rejects(startServer(['--api-key', '']), /must not be empty/);
});
