// Starts the real desktop app under tauri-driver (which drives WebKitWebDriver) and connects
// a WebDriver session to it. Needs a display: run under `xvfb-run` (scripts/e2e.sh does).
import { spawn } from 'node:child_process';
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
