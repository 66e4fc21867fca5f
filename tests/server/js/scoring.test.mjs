// `kvshrink serve` through the official `openai` npm client: log-probabilities (completions'
// legacy object with echo, chat's content entries, streamed), n = 3 samples and several prompts
// per request. Run by ctest (tests.cmake) with KVSHRINK_BIN and KVSHRINK_MODEL set; the server
// listens on a free loopback port.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { BIN, MODEL, startServer } from './server_process.mjs';

let srv;
let client;
before(async () => {
  assert.ok(BIN && MODEL, 'KVSHRINK_BIN and KVSHRINK_MODEL must be set');
  srv = await startServer();
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'none', maxRetries: 0 });
});
after(() => {
  if (srv) srv.proc.kill('SIGTERM');
});

test('completions: echo with logprobs scores every prompt token after the first', async () => {
  const r = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 3, temperature: 0, logprobs: 2, echo: true,
  });
  const c = r.choices[0];
  assert.ok(c.text.startsWith('Once upon a time'));
  const lp = c.logprobs;
  assert.equal(lp.tokens.length, lp.token_logprobs.length);
  assert.equal(lp.tokens.length, lp.top_logprobs.length);
  assert.equal(lp.tokens.length, lp.text_offset.length);
  assert.equal(lp.token_logprobs[0], null);
  assert.ok(lp.token_logprobs.length >= 4);
  for (let i = 1; i < lp.token_logprobs.length; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.ok(Object.keys(lp.top_logprobs[i]).length >= 1);
  }
  // The generated tokens are greedy: each is its position's most likely token.
  const gen = lp.token_logprobs.length - 3;
  for (let i = gen; i < lp.token_logprobs.length; i++)
    assert.equal(lp.token_logprobs[i], Math.max(...Object.values(lp.top_logprobs[i])));
});

test('chat: logprobs with top_logprobs, whole and streamed', async () => {
  const req = {
    model: 'stories260K', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 5,
    temperature: 0, logprobs: true, top_logprobs: 2,
  };
  const r = await client.chat.completions.create(req);
  const content = r.choices[0].logprobs.content;
  assert.ok(content.length >= 1);
  assert.equal(content.map((e) => e.token).join(''), r.choices[0].message.content);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
  }
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const streamed = [];
  for await (const chunk of stream) {
    for (const ch of chunk.choices) if (ch.logprobs?.content) streamed.push(...ch.logprobs.content);
  }
  assert.deepEqual(streamed.map((e) => e.logprob), content.map((e) => e.logprob));
});

test('n = 3: three choices, reproducible with a seed', async () => {
  const req = { model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, n: 3, seed: 11 };
  const a = await client.chat.completions.create(req);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  const b = await client.chat.completions.create(req);
  assert.deepEqual(b.choices.map((c) => c.message.content), a.choices.map((c) => c.message.content));
  assert.ok(new Set(a.choices.map((c) => c.message.content)).size >= 2, 'independent samples');
  const p = await client.completions.create({ model: 'stories260K', prompt: ['Once upon a time', 'Lily'], max_tokens: 4, n: 3, seed: 5 });
  assert.equal(p.choices.length, 6);
  assert.deepEqual(p.choices.map((c) => c.index), [0, 1, 2, 3, 4, 5]);
});

test('LangChain: multi-prompt generate sends the prompts in one request and gets one choice each', async () => {
  const { OpenAI: LangChainOpenAI } = await import('@langchain/openai');
  const llm = new LangChainOpenAI({
    model: 'stories260K', apiKey: 'none', configuration: { baseURL: `${srv.url}/v1` }, maxTokens: 8, temperature: 0,
    maxRetries: 0,
  });
  const prompts = ['Once upon a time', 'Lily saw a big', 'The dog'];
  const res = await llm.generate(prompts);
  assert.equal(res.generations.length, 3);
  for (let i = 0; i < 3; i++) {
    assert.equal(typeof res.generations[i][0].text, 'string');
    // Each is the answer its prompt gets alone.
    const one = await client.completions.create({ model: 'stories260K', prompt: prompts[i], max_tokens: 8, temperature: 0 });
    assert.equal(res.generations[i][0].text, one.choices[0].text);
  }
});
