// Figures for the desktop app, measured in the running app on the demo corpus: start-up to a
// usable window, search latency as the user sees it (keystroke to rendered results, through
// the debounce, IPC, the engine and Svelte), the assistant (Enter to the first token on
// screen, against `quarry chat` for the same question), and memory of the app and its WebKit
// processes at each stage.
// Run through scripts/bench-desktop.sh (which provides the display).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { evaluateModes, eventually, percentile, repoRoot, rssMiB, searchRendered, startApp, tempDir, tid } from './harness.mjs';

const rounds = Number(process.env.ROUNDS ?? 20);
const dataDir = tempDir('quarry-bench-');
const demo = path.join(repoRoot, 'seeds/demo');
const queries = [
  'how does an LRU cache evict entries',
  'borrow checker lifetimes',
  'vector search recall',
  'pump inlet pressure',
  'cache invalidation',
  'ownership rules',
  'approximate nearest neighbour',
  'service interval',
];

const spawned = performance.now();
const app = await startApp({ dataDir });
const { browser } = app;
try {
  await (await browser.$(tid('nav-library'))).waitForDisplayed({ timeout: 60_000 });
  const startup = performance.now() - spawned;
  const idle = rssMiB();

  const addedAt = performance.now();
  await (await browser.$(tid('add-path-input'))).setValue(demo);
  await (await browser.$(tid('add-source-button'))).click();
  const row = await browser.$(tid('source-row'));
  await row.waitForExist({ timeout: 20_000 });
  await eventually(browser, 'indexed', async () => (await row.getAttribute('data-phase')) === 'done');
  const indexed = performance.now() - addedAt;
  await eventually(
    browser,
    'embedded',
    async () => {
      const bars = await browser.$$(tid('embedding-progress'));
      return bars.length > 0 && /(\d[\d,]*) \/ \1\b/.test(await bars[0].getText());
    },
    180_000,
  );

  await (await browser.$(tid('nav-search'))).click();
  await (await browser.$(tid('search-input'))).waitForDisplayed();
  const figures = {};
  for (const mode of ['lexical', 'hybrid']) {
    await (await browser.$(tid(`mode-${mode}`))).click();
    const times = [];
    for (let i = 0; i < rounds; i++) {
      const query = `${queries[i % queries.length]} ${i}`;
      const ms = await searchRendered(browser, query);
      times.push(ms);
    }
    times.sort((a, b) => a - b);
    figures[mode] = { p50: percentile(times, 50), p95: percentile(times, 95), max: times.at(-1) };
  }
  const afterSearch = rssMiB();

  // The embedding lane releases its session after 15 s with nothing to embed.
  await new Promise((r) => setTimeout(r, 20_000));
  const afterLaneIdle = rssMiB();

  // The assistant: Enter to the first token on screen, and to the finished answer.
  await (await browser.$(tid('nav-chat'))).click();
  await (await browser.$(tid('chat-input'))).waitForDisplayed();
  const askTimed = (question) =>
    browser.executeAsync((q, done) => {
      const input = document.querySelector('[data-testid="chat-input"]');
      const finishedTurns = () => document.querySelectorAll('[data-testid="chat-turn"][aria-busy="false"]').length;
      const before = finishedTurns();
      const started = performance.now();
      let first = null;
      const observer = new MutationObserver(() => {
        const streaming = document.querySelector('[data-testid="chat-answer"][data-streaming]');
        if (first === null && streaming && streaming.textContent.trim()) first = performance.now() - started;
        const finished = !document.querySelector('[data-testid="chat-stop"]') && !streaming;
        if (finished && finishedTurns() > before) {
          observer.disconnect();
          const turn = [...document.querySelectorAll('[data-testid="chat-turn"]')].at(-1);
          const rate = Number(/([\d.]+) tokens\/s/.exec(turn.textContent)?.[1] ?? NaN);
          const total = performance.now() - started;
          // An answer decided before the model (a refusal by the evidence) appears whole.
          done({
            first: first ?? total,
            total,
            rate: Number.isFinite(rate) ? rate : null,
            backend: turn.querySelector('.meta .badge')?.textContent ?? '',
          });
        }
      });
      observer.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
      input.value = q;
      input.dispatchEvent(new Event('input', { bubbles: true }));
      input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    }, question);
  const question = 'What inlet pressure does the pump need?';
  const coldChat = await askTimed(question);
  const warmChat = await askTimed(`${question} Answer again.`);
  // The demo corpus's questions of the grounded-QA set, each in a new conversation of the
  // default mode, as `quarry eval --chat` asks them.
  const demoQuestions = fs
    .readFileSync(path.join(repoRoot, 'tests/data/grounded-qa/questions.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line))
    .filter((q) => q.source === 'demo')
    .slice(0, Number(process.env.CHAT_QUESTIONS ?? 10));
  const asked = [];
  for (const q of demoQuestions) {
    await (await browser.$(tid('chat-new'))).click();
    await (await browser.$(tid('chat-input'))).waitForDisplayed();
    asked.push(await askTimed(q.question));
  }
  const firsts = asked.map((a) => a.first).sort((a, b) => a - b);
  const totals = asked.map((a) => a.total).sort((a, b) => a - b);
  const withChatModel = rssMiB();

  // The same question through `quarry chat`: a new process, which loads the model every time.
  const cliFirstToken = await new Promise((resolve, reject) => {
    const started = performance.now();
    const cli = spawn(path.join(repoRoot, 'target/debug/quarry'), ['chat', question], {
      env: { ...process.env, QUARRY_DATA_DIR: dataDir },
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let first = null;
    cli.stdout.on('data', () => {
      first ??= performance.now() - started;
    });
    cli.on('error', reject);
    cli.on('close', () => resolve(first));
  });

  // Released from the Models view, the chat model gives its memory back.
  await (await browser.$(tid('nav-models'))).click();
  const unload = await browser.$(tid('model-unload'));
  await unload.waitForDisplayed({ timeout: 10_000 });
  await unload.click();
  await (await browser.$(tid('model-unload'))).waitForExist({ reverse: true, timeout: 10_000 });
  const afterRelease = rssMiB();

  // The pipeline tester: Ctrl+Enter to the complete render of every stage, for the default
  // pipeline and for one whose retrieval passes 100 candidates on.
  const call = (command, args) =>
    browser.executeAsync(
      (name, payload, done) => window.__TAURI_INTERNALS__.invoke(name, payload).then(done, (e) => done({ error: e })),
      command,
      args,
    );
  const wide = await call('tool_duplicate', { slug: 'retrieve-lexical-focused', newSlug: 'bench-wide', name: null, toolType: null });
  await call('tool_save', {
    slug: 'bench-wide',
    tool: {
      ...wide.tool,
      settings: { ...wide.tool.settings, limit: 100, max_per_document: 0, lexical_candidates: 300, min_lexical_score: 0 },
    },
    allowPrivateEgress: false,
  });
  await call('pipeline_create', { name: 'bench-wide', copyOf: null });
  await call('pipeline_edit', {
    name: 'bench-wide',
    draft: { query_tools: [], retrieval: 'bench-wide', retrieval_capabilities: [], chunk_tools: ['noop_chunk'], collections: [], budget: { max_query_variants: 4, max_evidence: 100 } },
  });
  await call('pipeline_save', { name: 'bench-wide' });
  // 100 candidates need more than the demo's 15 chunks: the Rust Book that ships with the
  // toolchain joins as a second folder, indexed, and then indexing is paused so the embedding
  // lane does not compete with the runs being timed.
  const sysroot = execFileSync('rustc', ['--print', 'sysroot'], { encoding: 'utf8' }).trim();
  const book = await call('add_source', {
    path: path.join(sysroot, 'share/doc/rust/html/book'),
    collection: 'book',
    include: [],
    exclude: [],
  });
  await eventually(
    browser,
    'the book indexed',
    async () => (await call('activity', {})).sources.some((a) => a.source_id === book.id && a.phase === 'done'),
    300_000,
  );
  await call('set_indexing_paused', { paused: true });

  /** Ms from Ctrl+Enter in the tester to the run of `query` rendered, measured in the page. */
  const testerRender = (query) =>
    browser.executeAsync((q, done) => {
      const box = document.querySelector('[data-testid="tester-query"]');
      box.value = q;
      box.dispatchEvent(new Event('input', { bubbles: true }));
      const started = performance.now();
      box.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', ctrlKey: true, bubbles: true }));
      const check = () => {
        const run = document.querySelector(`[data-testid="tester-run"][data-query="${CSS.escape(q)}"]`);
        const busy = document.querySelector('.results[aria-busy="true"]');
        if (run && !busy) {
          const detail = run.querySelector('[data-stage="retrieval"] [data-testid="tester-stage-detail"]')?.textContent ?? '';
          done({ ms: performance.now() - started, candidates: Number(/(\d+) candidate/.exec(detail)?.[1] ?? 0) });
        }
        else requestAnimationFrame(check);
      };
      requestAnimationFrame(check);
    }, query);
  const tester = {};
  for (const pipeline of ['default', 'bench-wide']) {
    await (await browser.$(tid('nav-pipelines'))).click();
    await (await browser.$(`${tid('pipeline-item')}[data-name="${pipeline}"]`)).click();
    await (await browser.$(tid('pipeline-tab-tester'))).click();
    const version = await browser.$(tid('tester-version'));
    await version.waitForDisplayed({ timeout: 10_000 });
    await version.selectByIndex(1); // the saved version, as searches and chats run it
    const times = [];
    let candidates = 0;
    for (let i = 0; i < rounds; i++) {
      const r = await testerRender(`${queries[i % queries.length]} ${i}`);
      times.push(r.ms);
      candidates = Math.max(candidates, r.candidates);
    }
    times.sort((a, b) => a - b);
    tester[pipeline] = { p50: percentile(times, 50), p95: percentile(times, 95), candidates };
  }

  // An evaluation on Cranfield (every mode: the set is indexed and embedded in a library of
  // its own), then the app's memory.
  const evalStarted = performance.now();
  await (await browser.$(tid('pipeline-tab-evaluate'))).click();
  await evaluateModes(browser, path.join(repoRoot, 'tests/data/cranfield'));
  await (await browser.$(`${tid('eval-row')}[data-name="hybrid"]`)).waitForExist({ timeout: 900_000 });
  const evalMs = performance.now() - evalStarted;
  const afterEval = rssMiB();
  await new Promise((r) => setTimeout(r, 20_000));
  const afterEvalIdle = rssMiB();

  const f = (n) => n.toFixed(0);
  for (const [pipeline, t] of Object.entries(tester)) {
    console.log(
      `tester, Ctrl+Enter to every stage rendered (${pipeline}, saved version, ${t.candidates} candidates, ` +
        `${rounds} queries): p50 ${f(t.p50)} ms, p95 ${f(t.p95)} ms`,
    );
  }
  console.log(
    `evaluation of Cranfield in the app (1,400 documents indexed and embedded, 3 modes × 225 queries): ` +
      `${(evalMs / 1000).toFixed(1)} s; app RSS ${f(afterEval.app)} MiB right after, ${f(afterEvalIdle.app)} MiB 20 s later ` +
      `(with WebKit's processes ${f(afterEval.total)} → ${f(afterEvalIdle.total)} MiB)`,
  );
  console.log(`start-up to a usable window: ${f(startup)} ms (tauri-driver session included)`);
  console.log(`add the demo folder → up to date on screen: ${f(indexed)} ms`);
  for (const [mode, t] of Object.entries(figures)) {
    console.log(
      `search, keystroke to rendered results (${mode}, ${rounds} queries, 150 ms debounce included): ` +
        `p50 ${f(t.p50)} ms, p95 ${f(t.p95)} ms, max ${f(t.max)} ms`,
    );
  }
  console.log(
    `chat, Enter to the first token on screen: ${f(coldChat.first)} ms the first time (the model loads), ` +
      `${f(warmChat.first)} ms after; whole answer ${f(coldChat.total)} / ${f(warmChat.total)} ms` +
      (warmChat.rate === null ? '' : `; ${warmChat.rate.toFixed(1)} tokens/s`) +
      ` (${warmChat.backend})`,
  );
  console.log(
    `chat, ${asked.length} questions of the grounded-QA set's demo corpus, each in a new conversation: ` +
      `first token p50 ${f(percentile(firsts, 50))} ms, p90 ${f(percentile(firsts, 90))} ms; ` +
      `whole answer p50 ${f(percentile(totals, 50))} ms, p90 ${f(percentile(totals, 90))} ms ` +
      `(${[...new Set(asked.map((a) => a.backend))].join(', ')})`,
  );
  console.log(`quarry chat, the same question from a new process to its first token: ${f(cliFirstToken)} ms`);
  console.log(
    `memory (RSS) of the app: ${f(idle.app)} MiB idle → ${f(afterSearch.app)} MiB after indexing and ` +
      `searching → ${f(afterLaneIdle.app)} MiB once the embedding lane released its session → ` +
      `${f(withChatModel.app)} MiB with the chat model loaded → ${f(afterRelease.app)} MiB after it was ` +
      `released; with WebKit's processes ${f(idle.total)} → ${f(afterSearch.total)} → ` +
      `${f(afterLaneIdle.total)} → ${f(withChatModel.total)} → ${f(afterRelease.total)} MiB`,
  );
} finally {
  await app.stop();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
