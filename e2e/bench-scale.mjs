// The window while a large tree is indexed and embedded: is it still responsive? Adds TREE (by
// default the toolchain's whole HTML documentation, about 52,000 files) to a new library in the
// running app, then every few seconds, for MINUTES (default 12) or until every vector is in,
// times what the user feels: a search from keystroke to rendered results (hybrid, so the query
// is embedded beside the lane), the Library view's activity call over IPC, and how late the
// page's own timers run (its main thread blocked). Prints each figure per phase (full text,
// then vectors) with the app's peak memory and the lane's progress.
// Run through `scripts/bench-desktop.sh scale` (which provides the display).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { eventually, percentile, rssMiB, searchRendered, startApp, tempDir, tid } from './harness.mjs';

const sysroot = execFileSync('rustc', ['--print', 'sysroot'], { encoding: 'utf8' }).trim();
const tree = process.env.TREE ?? path.join(sysroot, 'share/doc/rust/html');
const minutes = Number(process.env.MINUTES ?? 12);
const every = 3_000;
const queries = ['borrow checker', 'iterator adapters', 'lifetime elision', 'unsafe superpowers', 'trait objects', 'error handling'];
const dataDir = tempDir('quarry-bench-scale-');

const app = await startApp({ dataDir });
const { browser } = app;
try {
  await (await browser.$(tid('nav-library'))).waitForDisplayed({ timeout: 60_000 });
  const call = (command, args) =>
    browser.executeAsync(
      (name, payload, done) => {
        const started = performance.now();
        window.__TAURI_INTERNALS__.invoke(name, payload).then(
          (value) => done({ value, ms: performance.now() - started }),
          (e) => done({ error: e }),
        );
      },
      command,
      args,
    );
  // How late a 50 ms timer fires in the page: the longest delay since the last read.
  await browser.execute(() => {
    const lag = { max: 0, expected: performance.now() + 50 };
    window.__lag = lag;
    setInterval(() => {
      const now = performance.now();
      lag.max = Math.max(lag.max, now - lag.expected);
      lag.expected = now + 50;
    }, 50);
  });
  const readLag = () =>
    browser.execute(() => {
      const m = window.__lag.max;
      window.__lag.max = 0;
      return m;
    });

  const added = await call('add_source', { path: tree, collection: 'tree', include: [], exclude: [] });
  if (added.error) throw new Error(`add_source: ${JSON.stringify(added.error)}`);
  const sourceId = added.value.id;
  await (await browser.$(tid('nav-search'))).click();
  await (await browser.$(tid('search-input'))).waitForDisplayed();
  await (await browser.$(tid('mode-hybrid'))).click();

  const started = performance.now();
  const samples = [];
  let fullTextMs = null;
  let last = null;
  await readLag();
  for (let i = 0; performance.now() - started < minutes * 60_000; i++) {
    const round = performance.now();
    const search = await searchRendered(browser, `${queries[i % queries.length]} ${i}`);
    const activity = await call('activity', {});
    if (activity.error) throw new Error(`activity: ${JSON.stringify(activity.error)}`);
    const source = activity.value.sources.find((s) => s.source_id === sourceId);
    const fullTextDone = source?.phase === 'done';
    if (fullTextDone && fullTextMs === null) fullTextMs = performance.now() - started;
    last = activity.value.embedding.find((e) => e.collection === 'tree') ?? last;
    samples.push({
      phase: fullTextDone ? 'vectors' : 'full text',
      search,
      ipc: activity.ms,
      lag: await readLag(),
      rss: rssMiB(),
    });
    if (last?.done) break;
    await new Promise((r) => setTimeout(r, Math.max(0, every - (performance.now() - round))));
  }

  const f = (n) => n.toFixed(0);
  const line = (values) => {
    const sorted = [...values].sort((a, b) => a - b);
    return `p50 ${f(percentile(sorted, 50))}, p95 ${f(percentile(sorted, 95))}, max ${f(sorted.at(-1))} ms`;
  };
  console.log(`tree: ${tree}; sampled every ${every / 1000} s for ${((performance.now() - started) / 60_000).toFixed(1)} min`);
  console.log(`full text done after ${fullTextMs === null ? 'more than the run' : `${(fullTextMs / 1000).toFixed(1)} s`}`);
  for (const phase of ['full text', 'vectors']) {
    const rows = samples.filter((s) => s.phase === phase);
    if (!rows.length) continue;
    console.log(`while ${phase === 'full text' ? 'indexing full text' : 'the lane embeds'} (${rows.length} samples):`);
    console.log(`  search, keystroke to rendered results (hybrid): ${line(rows.map((r) => r.search))}`);
    console.log(`  activity over IPC (the Library view's poll): ${line(rows.map((r) => r.ipc))}`);
    console.log(`  page timer delay (main thread blocked): ${line(rows.map((r) => r.lag))}`);
    console.log(
      `  peak RSS: app ${f(Math.max(...rows.map((r) => r.rss.app)))} MiB ` +
        `(anonymous ${f(Math.max(...rows.map((r) => r.rss.appAnon)))} MiB), ` +
        `with WebKit's processes ${f(Math.max(...rows.map((r) => r.rss.total)))} MiB`,
    );
  }
  if (last) {
    console.log(
      `lane at the end: ${last.embedded.toLocaleString('en')} of ${last.total.toLocaleString('en')} chunks dealt with ` +
        `(${last.shared.toLocaleString('en')} shared, ${last.lexical_only.toLocaleString('en')} full text only), ` +
        `${f(last.tokens_per_sec)} tokens/s` +
        (last.eta_ms ? `, ${(last.eta_ms / 60_000).toFixed(1)} min left at that rate` : '') +
        (last.done ? ', done' : ''),
    );
  }
} finally {
  await app.stop();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
