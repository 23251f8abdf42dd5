// Starts the real desktop app under tauri-driver (which drives WebKitWebDriver) and connects
// a WebDriver session to it. Needs a display: run under `xvfb-run` (scripts/e2e.sh does).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { remote } from 'webdriverio';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The app binary: QUARRY_DESKTOP_BIN, else the debug build. */
export function appBinary() {
  const bin = process.env.QUARRY_DESKTOP_BIN ?? path.join(repoRoot, 'target/debug/quarry-desktop');
  if (!fs.existsSync(bin)) {
    throw new Error(`${bin} does not exist: build it first (cargo build --workspace)`);
  }
  return bin;
}

function tauriDriverBinary() {
  const candidates = [
    process.env.TAURI_DRIVER,
    path.join(os.homedir(), '.cargo/bin/tauri-driver'),
    '/usr/local/cargo/bin/tauri-driver',
  ].filter(Boolean);
  const found = candidates.find((c) => fs.existsSync(c));
  if (!found) {
    throw new Error(
      'tauri-driver not found: cargo install tauri-driver --version 2.1.0 --locked',
    );
  }
  return found;
}

/** A port nobody listens on now (the OS picks it). */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function waitForDriver(port, child, log) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(`tauri-driver exited with ${child.exitCode}:\n${log()}`);
    }
    try {
      const res = await fetch(`http://127.0.0.1:${port}/status`);
      // Ours, not a leftover driver's: the child must still be running.
      if (res.ok && child.exitCode === null) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`tauri-driver did not listen on ${port} within 30 s:\n${log()}`);
}

/**
 * Starts the app with its own data directory. `env` is added to the app's environment (it
 * passes through tauri-driver and WebKitWebDriver).
 */
export async function startApp({ dataDir, env = {} }) {
  const application = appBinary();
  const port = await freePort();
  const nativePort = await freePort();
  let output = '';
  const driver = spawn(
    tauriDriverBinary(),
    ['--port', String(port), '--native-port', String(nativePort), '--native-driver', '/usr/bin/WebKitWebDriver'],
    {
      env: { ...process.env, QUARRY_DATA_DIR: dataDir, QUARRY_LOG: 'info', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      // A process group of its own: stopping it stops WebKitWebDriver and the app too, even
      // when the app outlives its session (it inherits the driver's pipes, and a live app
      // once kept the whole test run waiting on them).
      detached: true,
    },
  );
  const killGroup = () => {
    try {
      process.kill(-driver.pid, 'SIGTERM');
    } catch {
      // already gone
    }
  };
  const keep = (chunk) => {
    output = (output + chunk.toString()).slice(-20_000);
  };
  driver.stdout.on('data', keep);
  driver.stderr.on('data', keep);
  await waitForDriver(port, driver, () => output);
  let browser;
  try {
    browser = await remote({
      hostname: '127.0.0.1',
      port,
      logLevel: 'warn',
      connectionRetryCount: 0,
      capabilities: { 'tauri:options': { application } },
    });
  } catch (e) {
    killGroup();
    throw new Error(`could not start the app through tauri-driver: ${e.message}\n${output}`);
  }
  return {
    browser,
    log: () => output,
    async stop() {
      try {
        await browser.deleteSession();
      } catch {
        // the app may already be gone
      }
      const exited = new Promise((r) => (driver.exitCode !== null || driver.signalCode !== null ? r() : driver.once('exit', r)));
      killGroup();
      await exited;
      driver.stdout.destroy();
      driver.stderr.destroy();
    },
  };
}

/** `[data-testid="…"]`. */
export const tid = (id) => `[data-testid="${id}"]`;

/** Replaces an input's or textarea's value as typing it would, without sending every key. */
export function typeInto(browser, element, value) {
  return browser.execute(
    (el, v) => {
      el.value = v;
      el.dispatchEvent(new Event('input', { bubbles: true }));
    },
    element,
    value,
  );
}

/** In the open Evaluate tab: scores every search mode (no pipeline) on the set at `set`. */
export async function evaluateModes(browser, set) {
  await typeInto(browser, await browser.$(tid('eval-set')), set);
  for (const box of await browser.$$(tid('eval-pipeline'))) if (await box.isSelected()) await box.click();
  await (await browser.$(tid('eval-run'))).click();
}

/** Polls `check` until it returns something truthy. */
export async function eventually(browser, what, check, timeout = 60_000) {
  let last;
  await browser.waitUntil(
    async () => {
      try {
        last = await check();
      } catch (e) {
        last = undefined;
      }
      return Boolean(last);
    },
    { timeout, interval: 250, timeoutMsg: `timed out after ${timeout} ms waiting for ${what}` },
  );
  return last;
}

/** A fresh temporary directory, removed by the caller. */
export function tempDir(prefix) {
  return fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), prefix)));
}

/** Resident memory (MiB) of the app and every process under it (WebKit's web and network
 * processes); `appAnon`: the app's own anonymous memory (its heap, without the pages of mapped
 * files such as the full-text index, which the kernel can drop). */
export function rssMiB() {
  const pids = execFileSync('pgrep', ['-f', 'quarry-desktop'], { encoding: 'utf8' })
    .split('\n')
    .filter(Boolean)
    .map(Number);
  const tree = new Set(pids);
  // WebKit's helper processes are children of the app.
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (tree.has(ppid)) tree.add(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  let app = 0;
  let appAnon = 0;
  let total = 0;
  for (const pid of tree) {
    try {
      const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
      const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
      const name = /Name:\s+(\S+)/.exec(status)?.[1] ?? '';
      total += kb;
      if (name.startsWith('quarry-desktop')) {
        app += kb;
        appAnon += Number(/RssAnon:\s+(\d+)/.exec(status)?.[1] ?? 0);
      }
    } catch {
      // gone meanwhile
    }
  }
  return { app: app / 1024, appAnon: appAnon / 1024, total: total / 1024 };
}

export function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/**
 * In the open Search view: types `query` at once and resolves with the ms until its results
 * (or "no results") render: the 150 ms debounce, the IPC round trip, the engine and the DOM
 * update.
 */
export function searchRendered(browser, query) {
  return browser.executeAsync((q, done) => {
    const input = document.querySelector('[data-testid="search-input"]');
    // The text alone can read the same for two searches ("20 results · 187 ms · hybrid"), and
    // then no change would ever be seen: each reply's own time in microseconds tells them apart.
    const meta = () => {
      const span = document.querySelector('[data-testid="search-meta"]');
      return span ? `${span.textContent} ${span.dataset.tookUs}` : '';
    };
    const empty = () => document.querySelector('[data-testid="search-empty"]');
    const before = meta();
    const started = performance.now();
    const finish = () => {
      observer.disconnect();
      done(performance.now() - started);
    };
    const observer = new MutationObserver(() => {
      if ((meta() && meta() !== before) || empty()) finish();
    });
    observer.observe(document.body, {
      subtree: true,
      childList: true,
      characterData: true,
      attributes: true,
      attributeFilter: ['data-took-us'],
    });
    input.value = q;
    input.dispatchEvent(new Event('input', { bubbles: true }));
    setTimeout(finish, 10_000);
  }, query);
}
