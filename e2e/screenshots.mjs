// Captures each view of the running app on the demo corpus into docs/screenshots/*.png.
// Run through scripts/screenshots.sh (which provides the display).
import fs from 'node:fs';
import path from 'node:path';

import { evaluateModes, eventually, repoRoot, startApp, tempDir, tid, typeInto } from './harness.mjs';

const out = path.join(repoRoot, 'docs/screenshots');
const demo = path.join(repoRoot, 'seeds/demo');
const dataDir = tempDir('quarry-screenshots-');
fs.mkdirSync(out, { recursive: true });

const app = await startApp({ dataDir });
const { browser } = app;
/** Scrolls the first element matching `selector` to the top of its pane. */
const scrollTo = (selector) =>
  browser.execute((sel) => {
    document.querySelector(sel)?.scrollIntoView({ block: 'start' });
    // Only the view's own pane scrolls; the window and its frame stay where they are.
    for (const frame of [document.documentElement, document.body, document.getElementById('app'), document.querySelector('.shell'), document.querySelector('.main')]) {
      if (frame) frame.scrollTop = 0;
    }
  }, selector);
const shot = async (name) => {
  await new Promise((r) => setTimeout(r, 400)); // let transitions settle
  await browser.saveScreenshot(path.join(out, `${name}.png`));
  console.log(`docs/screenshots/${name}.png`);
};

try {
  await browser.setWindowSize(1280, 800).catch(() => {});
  await (await browser.$(tid('nav-library'))).waitForDisplayed({ timeout: 60_000 });
  await (await browser.$(tid('add-path-input'))).setValue(demo);
  const collection = await browser.$(tid('add-collection-input'));
  await collection.clearValue();
  await collection.setValue('demo');
  await (await browser.$(tid('add-source-button'))).click();
  const row = await browser.$(tid('source-row'));
  await row.waitForExist({ timeout: 20_000 });
  await eventually(browser, 'the demo indexed', async () =>
    (await row.getAttribute('data-phase')) === 'done',
  );
  // Let the embedding lane finish too, so hybrid search and the progress show complete.
  await eventually(
    browser,
    'the demo embedded',
    async () => {
      const bars = await browser.$$(tid('embedding-progress'));
      if (bars.length === 0) return false;
      return (await bars[0].getText()).match(/(\d[\d,]*) \/ \1\b/);
    },
    180_000,
  ).catch(() => console.warn('embedding not finished; capturing anyway'));
  await shot('library');

  await (await browser.$(tid('nav-search'))).click();
  await (await browser.$(tid('search-input'))).setValue('how does an LRU cache evict entries');
  await eventually(browser, 'results', async () => (await browser.$$(tid('result-row'))).length > 0);
  await (await browser.$(tid('result-row'))).click();
  await (await browser.$(tid('preview-focus'))).waitForDisplayed({ timeout: 10_000 });
  await shot('search');

  await (await browser.$(tid('explain-toggle'))).click();
  await (await browser.$(tid('explain-trace'))).waitForDisplayed({ timeout: 10_000 });
  await shot('search-explain');
  await (await browser.$(tid('explain-toggle'))).click();

  await (await browser.$(tid('nav-status'))).click();
  await (await browser.$(tid('status-data-dir'))).waitForDisplayed({ timeout: 10_000 });
  await shot('status');

  // Status, MCP: a key created for a client, and its configuration.
  await (await browser.$(tid('mcp-setup'))).scrollIntoView();
  await (await browser.$(tid('mcp-key-name'))).setValue('claude-desktop');
  await (await browser.$(tid('mcp-create-key'))).click();
  await (await browser.$(tid('mcp-key-created'))).waitForDisplayed({ timeout: 10_000 });
  await (await browser.$(tid('mcp-setup'))).scrollIntoView();
  await shot('mcp');

  // Keys: one revoked, one just created with its secret on show.
  await (await browser.$(tid('nav-keys'))).click();
  for (const name of ['ci-bot', 'alice-laptop']) {
    await (await browser.$(tid('key-name'))).setValue(name);
    await (await browser.$(tid('key-create'))).click();
    await (await browser.$(`${tid('key-row')}[data-name="${name}"]`)).waitForExist({ timeout: 10_000 });
  }
  const bot = await browser.$(`${tid('key-row')}[data-name="ci-bot"]`);
  await (await bot.$(tid('key-revoke'))).click();
  await (await bot.$(tid('key-revoke-confirm'))).click();
  await eventually(browser, 'ci-bot revoked', async () => (await bot.getAttribute('data-state')) === 'revoked');
  await shot('keys');

  await (await browser.$(tid('nav-audit'))).click();
  await eventually(browser, 'audit records', async () => (await browser.$$(tid('audit-row'))).length >= 3);
  await (await browser.$(tid('audit-open'))).click();
  await shot('audit');

  // The orchestrator with an unsaved-then-saved edit, so the changes show.
  await (await browser.$(tid('nav-orchestrator'))).click();
  const draft = await browser.$(tid('orch-draft'));
  await draft.waitForDisplayed({ timeout: 10_000 });
  const config = JSON.parse(await draft.getValue());
  config.system_prompt += ' Answer in at most five sentences.';
  await typeInto(browser, draft, JSON.stringify(config, null, 2));
  await (await browser.$(tid('orch-save'))).click();
  await (await browser.$(tid('orch-change'))).waitForExist({ timeout: 10_000 });
  await shot('orchestrator');

  // The assistant: a cited answer, its cited passage in the preview, and its trace.
  await (await browser.$(tid('nav-chat'))).click();
  const input = await browser.$(tid('chat-input'));
  await input.waitForDisplayed();
  await input.setValue('How does an LRU cache evict entries?');
  await browser.keys('Enter');
  await eventually(
    browser,
    'the answer',
    async () => (await browser.$$(`${tid('chat-turn')}[aria-busy="false"]`)).length === 1,
    120_000,
  );
  const chip = await browser.$(tid('citation'));
  if (await chip.isExisting()) {
    await chip.click();
    await (await browser.$(tid('preview-focus'))).waitForDisplayed({ timeout: 10_000 });
  }
  await (await browser.$(tid('chat-trace-toggle'))).click();
  await (await browser.$(tid('chat-trace'))).waitForDisplayed({ timeout: 10_000 });
  await shot('chat');

  // The model manager.
  await (await browser.$(tid('nav-models'))).click();
  await (await browser.$(tid('model-row'))).waitForExist({ timeout: 20_000 });
  await shot('models');

  // The workbench: a code tool in the editor, its test, a pipeline's stages, the tester, and an
  // evaluation on Cranfield.
  await (await browser.$(tid('nav-tools'))).click();
  await (await browser.$(`${tid('tool-item')}[data-slug="expand_multi_query"]`)).click();
  await (await browser.$(tid('tool-settings-form'))).waitForDisplayed({ timeout: 30_000 });
  await shot('tools');
  await (await browser.$(tid('tool-tab-test'))).click();
  await typeInto(browser, await browser.$(tid('test-input')), '{"query": "How do I service the XR-200 pump?"}');
  await (await browser.$(tid('test-run'))).click();
  await (await browser.$(tid('test-result'))).waitForDisplayed({ timeout: 30_000 });
  await shot('tools-test');

  await (await browser.$(tid('nav-pipelines'))).click();
  await (await browser.$(`${tid('pipeline-item')}[data-name="default"]`)).click();
  await (await browser.$(`${tid('pipeline-stages')}[data-pipeline="default"]`)).waitForExist({ timeout: 20_000 });
  await shot('pipelines');
  await (await browser.$(tid('pipeline-tab-tester'))).click();
  await (await browser.$(tid('tester-query'))).setValue('How does an LRU cache evict entries?');
  await browser.keys(['Control', 'Enter']);
  await (await browser.$(tid('tester-run'))).waitForExist({ timeout: 60_000 });
  await scrollTo(`${tid('tester-stage')}[data-stage="retrieval"]`);
  await shot('tester');
  await (await browser.$(tid('pipeline-tab-evaluate'))).click();
  await evaluateModes(browser, path.join(repoRoot, 'tests/data/cranfield'));
  await (await browser.$(`${tid('eval-row')}[data-name="hybrid"]`)).waitForExist({ timeout: 600_000 });
  await scrollTo(tid('eval-result'));
  await shot('evaluate');

  // The dark theme, on the search, keys and audit views.
  await (await browser.$(tid('nav-status'))).click();
  await (await browser.$(tid('settings-theme'))).selectByAttribute('value', 'dark');
  await (await browser.$(tid('settings-save'))).click();
  await eventually(browser, 'the dark theme', async () =>
    (await browser.$('[data-theme="dark"]')).isExisting(),
  );
  const toast = await browser.$(tid('toast'));
  if (await toast.isExisting()) await (await toast.$('button[aria-label="Dismiss"]')).click();
  await (await browser.$(tid('nav-search'))).click();
  await shot('search-dark');
  await (await browser.$(tid('nav-keys'))).click();
  await shot('keys-dark');
  await (await browser.$(tid('nav-audit'))).click();
  await shot('audit-dark');
  await (await browser.$(tid('nav-orchestrator'))).click();
  await shot('orchestrator-dark');
  await (await browser.$(tid('nav-chat'))).click();
  await shot('chat-dark');
  await (await browser.$(tid('nav-models'))).click();
  await (await browser.$(tid('model-row'))).waitForExist({ timeout: 20_000 });
  await shot('models-dark');
  await (await browser.$(tid('nav-tools'))).click();
  await (await browser.$(tid('tool-settings-form'))).waitForDisplayed({ timeout: 30_000 });
  await shot('tools-dark');
  await (await browser.$(tid('nav-pipelines'))).click();
  await (await browser.$(tid('pipeline-tab-stages'))).click();
  await (await browser.$(`${tid('pipeline-stages')}[data-pipeline="default"]`)).waitForExist({ timeout: 20_000 });
  await shot('pipelines-dark');
  await (await browser.$(tid('pipeline-tab-tester'))).click();
  await (await browser.$(tid('tester-run'))).waitForExist({ timeout: 20_000 });
  await scrollTo(`${tid('tester-stage')}[data-stage="retrieval"]`);
  await shot('tester-dark');
  await (await browser.$(tid('pipeline-tab-evaluate'))).click();
  await (await browser.$(`${tid('eval-row')}[data-name="hybrid"]`)).waitForExist({ timeout: 20_000 });
  await scrollTo(tid('eval-result'));
  await shot('evaluate-dark');
} finally {
  await app.stop();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
