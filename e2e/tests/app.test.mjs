// The desktop app end to end, in a real WebKit window: add a folder, watch it index, search,
// open a result, retry a failed file, see a watched edit, pause, and remove the folder.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { after, afterEach, before, describe, it } from 'node:test';

import { fakeHub, llamaServer, mendQuietly, slowChatServer, writeCorpus } from '../fixtures.mjs';
import { eventually, repoRoot, startApp, tempDir, tid, typeInto } from '../harness.mjs';

describe('Quarry desktop', () => {
  const dataDir = tempDir('quarry-e2e-data-');
  const corpus = tempDir('quarry-e2e-corpus-');
  const work = tempDir('quarry-e2e-work-');
  const openerLog = path.join(work, 'opened.txt');
  const { broken } = writeCorpus(corpus);
  // Installs and imports go to a folder of the test's own; the checkout's models are read.
  const modelsDir = tempDir('quarry-e2e-models-');
  let hub;
  let app;
  let browser;

  before(async () => {
    hub = await fakeHub();
    // The opener stub records what the app asked to open instead of starting a program.
    const stub = path.join(work, 'opener.sh');
    fs.writeFileSync(stub, `#!/bin/sh\nprintf '%s\\n' "$@" >> '${openerLog}'\n`, { mode: 0o755 });
    app = await startApp({
      dataDir,
      env: {
        QUARRY_OPENER: `${stub} {path} {line} {page}`,
        QUARRY_HF_ENDPOINT: hub.url,
        QUARRY_MODELS_DIR: `${modelsDir}:${path.join(repoRoot, 'models/cache')}`,
      },
    });
    browser = app.browser;
    await (await browser.$(tid('nav-library'))).waitForDisplayed({ timeout: 60_000 });
  });

  afterEach(async (t) => {
    // A failing step leaves a screenshot and the app's log behind for whoever reads CI.
    if (browser && t.passed === false) {
      const dir = process.env.QUARRY_E2E_ARTIFACTS ?? path.join(os.tmpdir(), 'quarry-e2e-artifacts');
      fs.mkdirSync(dir, { recursive: true });
      const name = t.name.replace(/[^a-z0-9]+/gi, '-').slice(0, 60);
      await browser.saveScreenshot(path.join(dir, `${name}.png`)).catch(() => {});
      fs.writeFileSync(path.join(dir, `${name}.log`), app.log());
      console.error(`artifacts of the failed step: ${dir}/${name}.*`);
    }
  });

  after(async () => {
    if (app) await app.stop();
    if (hub) await hub.close();
    for (const dir of [dataDir, corpus, work, modelsDir]) fs.rmSync(dir, { recursive: true, force: true });
  });

  const sourceRow = () => browser.$(`${tid('source-row')}[data-root="${corpus}"]`);

  async function search(query) {
    await (await browser.$(tid('nav-search'))).click();
    const input = await browser.$(tid('search-input'));
    await input.waitForDisplayed();
    await input.clearValue();
    await input.setValue(query);
  }

  /** Calls one of the app's commands from the page, as the UI does. */
  function invoke(command, args = {}) {
    return browser.executeAsync(
      (name, payload, done) => {
        window.__TAURI_INTERNALS__
          .invoke(name, payload)
          .then(done, (e) => done({ error: e }));
      },
      command,
      args,
    );
  }

  async function resultPaths() {
    const rows = await browser.$$(tid('result-row'));
    const paths = [];
    for (const row of rows) paths.push(await row.getAttribute('data-path'));
    return paths;
  }

  async function chooseMode(mode) {
    const button = await browser.$(tid(`mode-${mode}`));
    await button.click();
    await eventually(browser, `${mode} mode`, async () =>
      (await button.getAttribute('aria-pressed')) === 'true',
    );
  }

  it('adds a folder by path and shows its progress until it is up to date', async () => {
    await (await browser.$(tid('nav-library'))).click();
    await (await browser.$(tid('add-path-input'))).setValue(corpus);
    const collection = await browser.$(tid('add-collection-input'));
    await collection.clearValue();
    await collection.setValue('field-notes');
    await (await browser.$(tid('add-source-button'))).click();

    const row = await sourceRow();
    await row.waitForExist({ timeout: 20_000, timeoutMsg: `no source row for ${corpus}` });
    await eventually(browser, 'the source to be up to date', async () =>
      (await row.getAttribute('data-phase')) === 'done' &&
      (await (await row.$(tid('source-progress'))).getText()).includes('Up to date'),
    );
    // The count comes with the next fetch of the source rows.
    await eventually(browser, 'three documents indexed', async () =>
      /\b3\b/.test(await (await row.$(tid('source-docs'))).getText()),
    );
  });

  it('bad input is an error naming the path or glob, and nothing indexed is lost', async () => {
    const missing = path.join(work, 'no-such-folder');
    const input = await browser.$(tid('add-path-input'));
    await input.clearValue();
    await input.setValue(missing);
    await (await browser.$(tid('add-source-button'))).click();
    const error = await eventually(browser, 'the add error', async () => {
      const text = await (await browser.$(tid('add-error'))).getText();
      return text.includes('no-such-folder') && text;
    });
    assert.match(error, /no-such-folder/);

    // A broken glob is named, and the folder is not added.
    await input.clearValue();
    await input.setValue(work);
    await (await browser.$(tid('add-include-input'))).setValue('notes/[draft');
    await (await browser.$(tid('add-source-button'))).click();
    await eventually(browser, 'the glob error', async () =>
      (await (await browser.$(tid('add-error'))).getText()).includes('notes/[draft'),
    );
    await (await browser.$(tid('add-include-input'))).clearValue();
    await input.clearValue();
    assert.equal((await browser.$$(tid('source-row'))).length, 1);
  });

  it('lists a failed file with its reason, and a retry reads it again', async () => {
    const problem = await browser.$(`${tid('problem-row')}[data-path="${broken}"]`);
    await problem.waitForExist({ timeout: 20_000, timeoutMsg: 'survey.pdf is not listed as a problem' });
    assert.match(await (await problem.$(tid('problem-reason'))).getText(), /parse/i);

    // Same size and mtime: the watcher sees the change but finds the file unchanged, so only
    // Retry reads it again.
    mendQuietly(broken);
    await eventually(browser, 'the watcher to handle the mended file', async () => {
      const activity = await invoke('activity');
      return activity.last_change?.paths.includes(broken);
    });
    const problems = await invoke('list_problems', { sourceId: null });
    assert.equal(problems.find((d) => d.path === broken)?.status, 'failed', 'still failed before the retry');
    assert.ok(await problem.isExisting(), 'still listed before the retry');
    // The card shows a progress bar while busy: click only once it has settled on this change,
    // or the layout moves under the click and the click lands beside the button.
    await eventually(browser, 'the card settled on the one-file check', async () => {
      const row = await sourceRow();
      return (
        (await row.getAttribute('data-phase')) === 'done' &&
        (await (await row.$(tid('source-progress'))).getText()).includes('1 file checked')
      );
    });
    const retry = await problem.$(tid('problem-retry'));
    await retry.click();
    await eventually(browser, 'the Retry click registered', async () =>
      !(await problem.isExisting()) || /Queued|Retrying/.test(await retry.getText()),
    );
    await problem.waitForExist({ reverse: true, timeout: 30_000, timeoutMsg: 'the retried file is still failing' });

    await search('quokkas rottnest');
    await eventually(browser, 'the mended PDF in results', async () =>
      (await resultPaths()).includes(broken),
    );
  });

  it('finds a document as you type, with highlights, a preview and an explanation', async () => {
    await search('lighthouse keeper');
    const hit = path.join(corpus, 'lighthouse.md');
    await eventually(browser, 'lighthouse.md in results', async () =>
      (await resultPaths())[0] === hit,
    );
    const first = await browser.$(tid('result-row'));
    assert.ok((await first.$$('mark')).length > 0, 'the snippet highlights the query');
    const meta = await browser.$(tid('search-meta'));
    assert.match(await meta.getText(), /\d/);
    // The benchmarks tell one reply from the next by it (the text can read the same).
    assert.match(await meta.getAttribute('data-took-us'), /^\d+$/);

    await first.click();
    const focus = await browser.$(`${tid('preview-pane')} ${tid('preview-focus')}`);
    await focus.waitForDisplayed({ timeout: 10_000 });
    assert.match(await focus.getText(), /lighthouse keeper/i);

    await (await browser.$(tid('explain-toggle'))).click();
    const trace = await browser.$(tid('explain-trace'));
    await trace.waitForDisplayed({ timeout: 10_000 });
    assert.match(await trace.getText(), /lexical/);
    await (await browser.$(tid('explain-toggle'))).click();

    // Deep: the plain results stay while the chat model's pass runs, then its note says
    // what it did (judged the candidates, or found the first ranking sure).
    await (await browser.$(tid('deep-toggle'))).click();
    const note = await browser.$(tid('deep-note'));
    await note.waitForDisplayed({ timeout: 60_000, timeoutMsg: 'the deep pass never answered' });
    assert.match(await note.getText(), /^Deep: (chat model \S+ judged \d+ of \d+ candidate|the first ranking was sure)/);
    assert.equal((await resultPaths())[0], hit);
    await (await browser.$(tid('deep-toggle'))).click();
    await note.waitForExist({ reverse: true, timeout: 10_000 });

    await chooseMode('lexical');
    await eventually(browser, 'lexical results', async () => (await resultPaths())[0] === hit);
  });

  it('shows a copy of a document as one result, also at the copy', async () => {
    const hit = path.join(corpus, 'lighthouse.md');
    const copy = path.join(corpus, 'lighthouse-copy.md');
    fs.copyFileSync(hit, copy);
    // The watcher indexes the copy; each search is typed again until it shows.
    await eventually(browser, 'the copy folded into the original', async () => {
      await search('lighthouse keeper');
      const also = await browser.$(tid('result-also-at'));
      await also.waitForExist({ timeout: 2_000 });
      return (await also.getText()).includes('lighthouse-copy.md');
    });
    assert.deepEqual((await resultPaths()).filter((p) => p.includes('lighthouse')), [hit]);
    fs.rmSync(copy);
    await eventually(browser, 'the copy gone from the hit', async () => {
      await search('lighthouse keeper');
      await browser.pause(500);
      return (await resultPaths())[0] === hit && !(await (await browser.$(tid('result-also-at'))).isExisting());
    });
  });

  it('opens a result at its line through the opener', async () => {
    const first = await browser.$(tid('result-row'));
    await (await first.$(tid('result-open'))).click();
    const opened = await eventually(browser, 'the opener to be called', async () =>
      fs.existsSync(openerLog) && fs.readFileSync(openerLog, 'utf8'),
    );
    const [file, line] = opened.trim().split('\n');
    assert.equal(file, path.join(corpus, 'lighthouse.md'));
    assert.match(line, /^\d+$/);
    const toast = await browser.$(tid('toast'));
    await toast.waitForDisplayed({ timeout: 5_000 });
    assert.match(await toast.getText(), /Opened lighthouse\.md/);
  });

  it('reads a scanned page by OCR, finds it by a word only its pixels hold, and previews it', async () => {
    const scan = path.join(corpus, 'receipt.png');
    // ImageMagick (scripts/setup.sh installs it) sets the text in pixels: no text layer.
    const rendered = spawnSync('convert', [
      '-density', '300', '-units', 'PixelsPerInch', '-background', 'white', '-fill', 'black',
      '-font', 'DejaVu-Sans', '-pointsize', '12', '-size', '1950x',
      'caption:Receipt from Quillfeather Stationers for two reams of paper.',
      '-bordercolor', 'white', '-border', '75', '-colorspace', 'Gray', scan,
    ]);
    assert.equal(rendered.status, 0, String(rendered.stderr));
    await chooseMode('lexical');
    await eventually(browser, 'the scan in results', async () => {
      await search('Quillfeather');
      await browser.pause(300);
      return (await resultPaths())[0] === scan;
    });
    const first = await browser.$(tid('result-row'));
    assert.match(await first.getText(), /recognised text \(OCR\), page 1/);
    await first.click();
    const focus = await browser.$(`${tid('preview-pane')} ${tid('preview-focus')}`);
    await focus.waitForDisplayed({ timeout: 10_000 });
    assert.match(await focus.getText(), /Quillfeather/);
    assert.match(await focus.getText(), /recognised text \(OCR\)/);
    // Gone again, so the counts later tests check stay those of the corpus.
    fs.rmSync(scan);
    await eventually(browser, 'the scan gone from the results', async () => {
      await search('Quillfeather');
      await browser.pause(500);
      return !(await resultPaths()).includes(scan);
    });
  });

  it('shows an edit to a watched file without searching again', async () => {
    // Lexical: a vector search always has nearest neighbours, so "no results" needs keywords.
    await search('zephyrine marmot');
    await chooseMode('lexical');
    await (await browser.$(tid('search-empty'))).waitForDisplayed({ timeout: 10_000 });
    const edited = path.join(corpus, 'guides/orchard.txt');
    fs.appendFileSync(edited, '\nA zephyrine marmot was seen between the apple rows.\n');
    await eventually(browser, 'the edited file in results', async () =>
      (await resultPaths()).includes(edited),
    );
  });

  it('pauses and resumes indexing', async () => {
    await (await browser.$(tid('nav-library'))).click();
    const toggle = await browser.$(tid('pause-toggle'));
    await toggle.click();
    await eventually(browser, 'paused', async () => (await toggle.getAttribute('data-state')) === 'paused');
    // Nothing is watched while paused, so the folder is no longer known to be up to date.
    await eventually(browser, 'the source queued', async () =>
      (await (await sourceRow()).getAttribute('data-phase')) === 'queued',
    );
    await toggle.click();
    await eventually(browser, 'running', async () => (await toggle.getAttribute('data-state')) === 'running');
    await eventually(browser, 'the source rescanned and up to date again', async () =>
      (await (await sourceRow()).getAttribute('data-phase')) === 'done',
    );
  });

  it('shows the data directory and counts on the status view', async () => {
    await (await browser.$(tid('nav-status'))).click();
    const dir = await browser.$(tid('status-data-dir'));
    await dir.waitForDisplayed({ timeout: 10_000 });
    assert.equal((await dir.getText()).trim(), dataDir);
    // lighthouse.md, orchard.txt, bread.md and the mended survey.pdf.
    await eventually(browser, 'four documents indexed', async () =>
      (await (await browser.$(tid('status-documents'))).getText()).trim() === '4',
    );
  });

  it('reaches a view and an action by name from the command palette', async () => {
    const palette = async (text) => {
      await browser.keys(['Control', 'Shift', 'p']);
      const input = await browser.$(tid('palette-input'));
      await input.waitForDisplayed({ timeout: 5_000 });
      await input.setValue(text);
      // The best match is listed first and chosen by Enter.
      return (await browser.$$(tid('palette-option')))[0];
    };
    const first = await palette('models');
    assert.equal(await first.getAttribute('data-command'), 'view-models');
    await browser.keys('Enter');
    await eventually(browser, 'the Models view', async () =>
      (await (await browser.$(tid('nav-models'))).getAttribute('aria-current')) === 'page',
    );
    await palette('pause indexing');
    await browser.keys('Enter');
    await (await browser.$(tid('nav-library'))).click();
    const toggle = await browser.$(tid('pause-toggle'));
    await eventually(browser, 'paused from the palette', async () => (await toggle.getAttribute('data-state')) === 'paused');
    const resume = await palette('resume');
    assert.equal(await resume.getAttribute('data-command'), 'indexing-resume');
    await browser.keys('Enter');
    await eventually(browser, 'resumed from the palette', async () => (await toggle.getAttribute('data-state')) === 'running');
    await eventually(browser, 'the source up to date again', async () =>
      (await (await sourceRow()).getAttribute('data-phase')) === 'done',
    );
  });

  /** `quarry search` in lexical mode as the key `secret`, on the app's library. */
  function searchAsKey(secret) {
    const quarry = path.join(repoRoot, 'target', 'debug', 'quarry');
    return spawnSync(quarry, ['search', 'lighthouse', '--mode', 'lexical', '--as', secret, '--json'], {
      env: { ...process.env, QUARRY_DATA_DIR: dataDir },
      encoding: 'utf8',
    });
  }

  const keyRow = (name) => browser.$(`${tid('key-row')}[data-name="${name}"]`);

  it('creates a key limited to a collection, shows its secret once, and revokes it', async () => {
    await (await browser.$(tid('nav-keys'))).click();
    await (await browser.$(tid('key-name'))).setValue('e2e-reader');
    await (await browser.$(tid('key-all-collections'))).click();
    await (await browser.$(tid('key-collection-field-notes'))).click();
    await (await browser.$(tid('key-ceiling'))).selectByAttribute('value', 'internal');
    await (await browser.$(tid('key-create'))).click();

    const shown = await browser.$(tid('key-secret'));
    await shown.waitForDisplayed({ timeout: 10_000 });
    const secret = await shown.getAttribute('data-secret');
    assert.match(secret, /^qk_/);
    const row = await keyRow('e2e-reader');
    await row.waitForExist({ timeout: 10_000 });
    assert.equal(await row.getAttribute('data-state'), 'active');
    assert.match(await row.getText(), /field-notes/);
    assert.ok(!(await row.getText()).includes(secret), 'the list never shows a secret');
    await (await browser.$(tid('key-secret-done'))).click();

    // The secret is a working key: the CLI searches with it.
    const before = searchAsKey(secret);
    assert.equal(before.status, 0, before.stderr);
    assert.match(before.stdout, /lighthouse/);

    // The same name again: the engine's error, at the form, and nothing changes.
    await (await browser.$(tid('key-name'))).setValue('e2e-reader');
    await (await browser.$(tid('key-create'))).click();
    const error = await browser.$(tid('key-error'));
    await error.waitForDisplayed({ timeout: 10_000 });
    assert.match(await error.getText(), /e2e-reader/);
    assert.equal((await browser.$$(tid('key-row'))).length, 1);

    await (await row.$(tid('key-revoke'))).click();
    await (await row.$(tid('key-revoke-confirm'))).click();
    await eventually(browser, 'the key to show as revoked', async () =>
      (await (await keyRow('e2e-reader')).getAttribute('data-state')) === 'revoked',
    );
    const after = searchAsKey(secret);
    assert.notEqual(after.status, 0, 'a revoked key is refused');
    assert.match(after.stderr, /revoked/);
  });

  it('lists key changes and refusals in the audit log, filtered by outcome', async () => {
    await (await browser.$(tid('nav-audit'))).click();
    const listed = async (attribute) => {
      const values = [];
      for (const row of await browser.$$(tid('audit-row'))) values.push(await row.getAttribute(attribute));
      return values;
    };
    await eventually(browser, 'the key changes in the audit log', async () => {
      const actions = await listed('data-action');
      return ['key.create', 'key.revoke', 'auth'].every((a) => actions.includes(a));
    });
    await (await browser.$(tid('audit-filter-outcome'))).selectByAttribute('value', 'error');
    await eventually(browser, 'only failures listed', async () => {
      const outcomes = await listed('data-outcome');
      return outcomes.length >= 2 && outcomes.every((o) => o === 'error');
    });
    // The refused duplicate opens to the engine's message.
    const duplicate = await browser.$(`${tid('audit-row')}[data-action="key.create"]`);
    await (await duplicate.$(tid('audit-open'))).click();
    const detail = await browser.$(tid('audit-detail'));
    await detail.waitForDisplayed({ timeout: 5_000 });
    assert.match(await detail.getText(), /e2e-reader/);
    await (await browser.$(tid('audit-filter-outcome'))).selectByAttribute('value', '');
  });

  /** Starts the configured MCP server over stdio and sends requests as a client would. */
  function mcpClient(server) {
    const child = spawn(server.command, server.args, {
      env: { ...process.env, ...server.env },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const waiting = new Map();
    readline.createInterface({ input: child.stdout }).on('line', (line) => {
      const message = JSON.parse(line);
      waiting.get(message.id)?.(message);
    });
    let next = 0;
    const send = (message) => child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
    return {
      request: (method, params) =>
        new Promise((resolve) => {
          const id = ++next;
          waiting.set(id, resolve);
          send({ id, method, params });
        }),
      notify: (method) => send({ method }),
      stop: () => child.kill(),
    };
  }

  it('sets up an MCP client from the status view, and its calls reach the audit log', async () => {
    await (await browser.$(tid('nav-status'))).click();
    const setup = await browser.$(tid('mcp-setup'));
    await setup.scrollIntoView();
    await (await browser.$(tid('mcp-key-name'))).setValue('e2e-mcp');
    await (await browser.$(tid('mcp-create-key'))).click();
    await (await browser.$(tid('mcp-key-created'))).waitForDisplayed({ timeout: 10_000 });
    const config = JSON.parse(await (await browser.$(tid('mcp-config'))).getAttribute('data-config'));
    const server = config.mcpServers.quarry;
    assert.match(server.env.QUARRY_KEY, /^qk_/);
    assert.deepEqual(server.args, ['--data-dir', dataDir, 'mcp', '--mode', 'agent']);

    // The configuration works as a client would use it.
    const client = mcpClient(server);
    try {
      const init = await client.request('initialize', {
        protocolVersion: '2025-06-18',
        capabilities: {},
        clientInfo: { name: 'e2e-client', version: '1' },
      });
      assert.equal(init.result.serverInfo.name, 'quarry');
      client.notify('notifications/initialized');
      const tools = (await client.request('tools/list', {})).result.tools.map((t) => t.name);
      assert.ok(tools.includes('knowledge_search') && tools.includes('fetch_document_chunks'), tools.join());
      const call = await client.request('tools/call', { name: 'run_pipeline', arguments: { query: 'lighthouse' } });
      assert.equal(call.result.isError, false, JSON.stringify(call));
      assert.match(call.result.content[0].text, /lighthouse/i);
    } finally {
      client.stop();
    }

    await (await browser.$(tid('nav-audit'))).click();
    await (await browser.$(tid('audit-refresh'))).click();
    const row = await browser.$(`${tid('audit-row')}[data-action="mcp.call"]`);
    await row.waitForExist({ timeout: 10_000 });
    await (await row.$(tid('audit-open'))).click();
    const detail = await browser.$(tid('audit-detail'));
    await detail.waitForDisplayed({ timeout: 5_000 });
    assert.match(await detail.getText(), /client e2e-client/);

    // Status says how big the audit log is and what it keeps.
    await (await browser.$(tid('nav-status'))).click();
    const audit = await browser.$(tid('status-audit'));
    await audit.waitForDisplayed({ timeout: 10_000 });
    assert.match(await audit.getText(), /^\S+ records.*; keeps 365 days, at most 500\D?000 records$/);

    // A session served as the administrator (`--admin`) is one of the owner's conversations:
    // the Chat list keeps it apart from the user's own, under its client's name.
    const admin = mcpClient({ command: server.command, args: [...server.args, '--admin'], env: {} });
    try {
      await admin.request('initialize', {
        protocolVersion: '2025-06-18',
        capabilities: {},
        clientInfo: { name: 'e2e-admin-client', version: '1' },
      });
      admin.notify('notifications/initialized');
      const call = await admin.request('tools/call', { name: 'run_pipeline', arguments: { query: 'lighthouse' } });
      assert.equal(call.result.isError, false, JSON.stringify(call));
    } finally {
      admin.stop();
    }
    await (await browser.$(tid('nav-chat'))).click();
    const sessions = await browser.$(tid('chat-agent-sessions'));
    await sessions.waitForDisplayed({ timeout: 10_000 });
    assert.match(await sessions.getText(), /e2e-admin-client/);
  });

  it('edits the orchestrator draft, shows what it changes, and applies it as a new revision', async () => {
    await (await browser.$(tid('nav-orchestrator'))).click();
    const draft = await browser.$(tid('orch-draft'));
    await draft.waitForDisplayed({ timeout: 10_000 });
    const revisions = async () => (await browser.$$(tid('orch-revision'))).length;
    const before = await revisions();
    assert.ok(before >= 1, 'the seeded configuration is applied as revision 1');
    const config = JSON.parse(await draft.getValue());
    // What a person types, without sending thousands of keys over WebDriver.
    const edit = (value) => typeInto(browser, draft, value);

    // A default mode that does not exist: the engine's message names the field; nothing saved.
    await edit(JSON.stringify({ ...config, default_mode: 'no-such-mode' }, null, 2));
    await (await browser.$(tid('orch-save'))).click();
    const error = await browser.$(tid('orch-error'));
    await error.waitForDisplayed({ timeout: 10_000 });
    assert.match(await error.getText(), /default_mode/);
    assert.equal((await browser.$$(tid('orch-change'))).length, 0);

    await edit(JSON.stringify({ ...config, system_prompt: `${config.system_prompt} Be brief.` }, null, 2));
    await (await browser.$(tid('orch-save'))).click();
    const change = await browser.$(`${tid('orch-change')}[data-path="system_prompt"]`);
    await change.waitForExist({ timeout: 10_000 });
    assert.match(await change.getText(), /Be brief/);

    await (await browser.$(tid('orch-apply'))).click();
    await (await browser.$(tid('orch-apply-confirm'))).click();
    await eventually(browser, 'a new revision', async () => (await revisions()) === before + 1);
    const applied = await browser.$(tid('orch-applied'));
    assert.equal(Number(await applied.getAttribute('data-revision')), before + 1);
    assert.match(await applied.getText(), /Be brief/);
    assert.equal((await browser.$$(tid('orch-change'))).length, 0, 'the draft is what is applied');

    await (await browser.$(tid('nav-audit'))).click();
    await (await browser.$(`${tid('audit-row')}[data-action="orchestrator.apply"]`)).waitForExist({
      timeout: 10_000,
    });
  });

  async function openChat() {
    await (await browser.$(tid('nav-chat'))).click();
    await (await browser.$(tid('chat-input'))).waitForDisplayed({ timeout: 10_000 });
  }

  async function ask(question) {
    const input = await browser.$(tid('chat-input'));
    await input.setValue(question);
    await browser.keys('Enter');
  }

  /** The newest finished turn, once there are `count` of them. */
  async function finishedTurn(count, timeout = 120_000) {
    await eventually(
      browser,
      `${count} finished turn(s)`,
      async () =>
        (await browser.$$(`${tid('chat-turn')}[aria-busy="false"]`)).length === count &&
        !(await browser.$(tid('chat-stop')).isExisting()),
      timeout,
    );
    const turns = await browser.$$(tid('chat-turn'));
    return turns[turns.length - 1];
  }

  /** Chooses where answers come from in the backend form (checked by the app first). */
  async function chooseBackend(kind, fields = {}) {
    await (await browser.$(tid('chat-backend-change'))).click();
    const form = await browser.$(tid('chat-backend-form'));
    await form.waitForDisplayed();
    await (await form.$(tid('chat-backend-kind'))).selectByAttribute('value', kind);
    if (fields.url) await (await form.$(tid('chat-backend-url'))).setValue(fields.url);
    if (fields.model) await (await form.$(tid('chat-backend-model'))).setValue(fields.model);
    if (fields.key) await (await form.$(tid('chat-backend-key'))).setValue(fields.key);
    if (fields.grammar) await (await form.$(tid('chat-backend-grammar'))).click();
    await (await form.$(tid('chat-backend-save'))).click();
    return form;
  }

  /** Dismisses the toast a choice leaves (it sits over the view's top buttons). */
  async function dismissToast() {
    const toast = await browser.$(tid('toast'));
    if (await toast.isExisting()) await (await toast.$('button[aria-label="Dismiss"]')).click();
  }

  it('answers in the chat with the embedded model, cites its sources, and a citation opens its passage', async () => {
    await openChat();
    await (await browser.$(tid('chat-new'))).click();
    // Before the first answer, the view says the model will load, and how big it is.
    assert.match(await (await browser.$(tid('chat-model-size'))).getText(), /loads the model \([\d.]+ MB\)/);
    await ask('When does the keeper sound the horn?');
    const turn = await finishedTurn(1);
    const chip = await turn.$(tid('citation'));
    await chip.waitForExist({ timeout: 5_000, timeoutMsg: `no citation in: ${await turn.getText()}` });
    assert.match(await turn.$('.badge').getText(), /embedded qwen2\.5-coder-0\.5b/);
    // Beside the model, how the answer stands on the evidence.
    assert.match(await turn.$(tid('chat-basis')).getText(), /found in \d+ passages?/);

    // Hovering a citation shows its file and passage.
    await chip.moveTo();
    const card = await browser.$(tid('citation-card'));
    await card.waitForDisplayed({ timeout: 5_000 });
    assert.match(await card.getText(), /\.md/);

    // A citation opens its passage in the preview pane.
    await chip.click();
    const focus = await browser.$(tid('preview-focus'));
    await focus.waitForDisplayed({ timeout: 10_000 });
    assert.match(await focus.getText(), /horn|keeper|wick/i);

    // The trace says which tools ran and what they admitted.
    await (await turn.$(tid('chat-trace-toggle'))).click();
    const trace = await turn.$(tid('chat-trace'));
    await eventually(browser, 'the trace', async () => /run_pipeline/.test(await trace.getText()));
    assert.match(await trace.getText(), /llm\.generate/);
    // ... which sentences the model was shown, and what it wrote before the answer check.
    const selected = await trace.$('li[data-kind="evidence.selected"]');
    assert.match(await selected.getText(), /sentences shown from \d+ passages[\s\S]*\[\d+\] \d\.\d\d · /);
    assert.match(await (await trace.$('li[data-kind="answer.checked"]')).getText(), /draft: /);

    // The conversation goes on, and is listed by its first question.
    await ask('And what does the keeper do at dusk?');
    await finishedTurn(2);
    const listed = await browser.$(tid('chat-conversation'));
    assert.match(await listed.getAttribute('data-title'), /keeper sound the horn/);
  });

  it('streams an answer from a server and stops it mid-way, keeping what was written', async () => {
    const answer = 'The keeper sounds the horn every thirty seconds when fog rolls in [1]. '.repeat(8);
    const server = await slowChatServer(answer, 120);
    try {
      await openChat();
      await chooseBackend('openai', { url: server.url, model: 'slow', key: 'sk-e2e-secret' });
      await eventually(browser, 'the server chosen', async () =>
        (await browser.$(tid('chat-backend')).getText()).includes(server.url),
      );
      await dismissToast();
      // The key went to the server, and to the keyring (or an owner-only file), not the settings.
      assert.equal(server.authorizations.at(-1), 'Bearer sk-e2e-secret');
      const settingsFile = fs.readFileSync(path.join(dataDir, 'desktop-settings.json'), 'utf8');
      assert.ok(!settingsFile.includes('sk-e2e-secret'), settingsFile);
      await (await browser.$(tid('chat-new'))).click();
      await ask('How often does the keeper sound the horn in fog?');
      // Tokens arrive one by one while the turn runs.
      const streaming = await browser.$(`${tid('chat-answer')}[data-streaming="true"]`);
      await eventually(browser, 'streamed words', async () => (await streaming.getText()).split(' ').length >= 4);
      await (await browser.$(tid('chat-stop'))).click();
      const turn = await finishedTurn(1, 20_000);
      assert.equal(server.authorizations.at(-1), 'Bearer sk-e2e-secret', 'a turn sends the kept key');
      const text = await (await turn.$(tid('chat-answer'))).getText();
      assert.ok(text.length > 0 && text.length < answer.length / 2, `stopped early: ${text.length} characters`);
      assert.match(await turn.getText(), /stopped/);

      // Regenerate asks the same question again in its place.
      await (await turn.$(tid('chat-regenerate'))).click();
      await (await browser.$(tid('chat-stop'))).waitForDisplayed({ timeout: 10_000 });
      await (await browser.$(tid('chat-stop'))).click();
      await finishedTurn(1, 20_000);
    } finally {
      await server.close();
    }

    // With the server gone, choosing it again says what is wrong, and nothing changes.
    const form = await chooseBackend('openai', { url: server.url, model: 'slow' });
    const error = await form.$(tid('chat-backend-error'));
    await error.waitForDisplayed({ timeout: 20_000 });
    assert.match(await error.getText(), /127\.0\.0\.1/);
    await (await form.$('button=Cancel')).click();

    // Extractive answers need no model at all.
    await chooseBackend('extractive');
    await eventually(browser, 'extractive chosen', async () =>
      /extractive/.test(await browser.$(tid('chat-backend')).getText()),
    );
    await dismissToast();
    await (await browser.$(tid('chat-new'))).click();
    await ask('What do apple orchards need?');
    const turn = await finishedTurn(1);
    assert.match(await turn.getText(), /extractive/);
    await (await turn.$(tid('citation'))).waitForExist({ timeout: 5_000 });
    await chooseBackend('mode');
  });

  it('answers through a real llama-server, cited, and says what is wrong once it is gone', async () => {
    const server = await llamaServer(repoRoot);
    try {
      await openChat();
      await chooseBackend('openai', { url: server.url, model: 'smollm2', grammar: true });
      await eventually(browser, 'llama-server chosen', async () =>
        (await browser.$(tid('chat-backend')).getText()).includes(server.url),
      );
      await dismissToast();
      await (await browser.$(tid('chat-new'))).click();
      await ask('When does the keeper sound the horn?');
      const turn = await finishedTurn(1);
      assert.match(await turn.$('.badge').getText(), /openai smollm2/);
      // The 135M model's words depend on the CPU: a cited answer, or the answer check's
      // refusal when the passages hold none of its sentences.
      await eventually(browser, `a citation or the check's refusal in: ${await turn.getText()}`, async () =>
        (await turn.$(tid('citation')).isExisting()) ||
        /The passages found do not answer this/.test(await turn.getText()),
        5_000,
      );
    } finally {
      await server.stop();
    }
    // The server is gone: the answer falls back to the evidence, and the panel says why.
    await ask('What does the keeper do at dusk?');
    const turn = await finishedTurn(2);
    assert.match(await turn.getText(), /answering extractively/);
    await (await browser.$(tid('chat-problem'))).waitForDisplayed({ timeout: 5_000 });
    await (await browser.$(tid('chat-use-extractive'))).click();
    await eventually(browser, 'extractive chosen', async () =>
      /extractive/.test(await browser.$(tid('chat-backend')).getText()),
    );
    await dismissToast();
    await chooseBackend('mode');
  });

  it('renames and deletes conversations', async () => {
    await openChat();
    const before = (await browser.$$(tid('chat-conversation'))).length;
    await (await browser.$(tid('chat-rename'))).click();
    const input = await browser.$(tid('chat-rename-input'));
    await input.clearValue();
    await input.setValue('Orchard notes');
    await browser.keys('Enter');
    await eventually(browser, 'the new title', async () =>
      (await (await browser.$(tid('chat-conversation'))).getAttribute('data-title')) === 'Orchard notes',
    );
    await (await browser.$(tid('chat-delete'))).click();
    await (await browser.$(tid('chat-delete-confirm'))).click();
    await eventually(browser, 'one conversation fewer', async () =>
      (await browser.$$(tid('chat-conversation'))).length === before - 1,
    );
  });

  const modelRow = (id) => browser.$(`${tid('model-row')}[data-id="${id}"]`);

  const chatModel = 'qwen2.5-coder-0.5b-instruct-q4_k_m';

  async function openModels() {
    await (await browser.$(tid('nav-models'))).click();
    await (await modelRow(chatModel)).waitForExist({ timeout: 20_000 });
  }

  it('lists the installed models with their checked sha256, and refuses to delete one in use', async () => {
    await openModels();
    for (const id of ['all-minilm-l6-v2-int8', chatModel, 'smollm2-135m-instruct-q4_1']) {
      const row = await modelRow(id);
      assert.equal(await row.getAttribute('data-verified'), 'true', `${id} is verified`);
    }
    const llm = await modelRow(chatModel);
    // It was joined from parts an anonymous publisher uploaded: the row says so.
    assert.match(await (await llm.$(tid('model-provenance'))).getText(), /without a stated licence/);
    await (await llm.$('button*=Files')).click();
    assert.match(await (await llm.$(tid('model-sha256'))).getText(), /^[0-9a-f]{64}$/);
    assert.match(await (await browser.$(tid('models-runtime'))).getAttribute('data-ok'), /true/);
    // Embedding runs on the CPU here: CI's runtime is the CPU build, with no CUDA provider.
    assert.match(await (await browser.$(tid('models-embedding-device'))).getText(), /^Embedding models run on CPU: the ONNX Runtime at `.+` has no CUDA execution provider/);

    // Measure times each installed chat model here; the row shows its speed, and the seeded
    // modes' `auto` model stays the default where nothing more accurate is installed.
    await (await browser.$(tid('models-measure'))).click();
    const speed = await llm.$(tid('model-speed'));
    await speed.waitForDisplayed({ timeout: 120_000, timeoutMsg: 'no measured speed on the chat model' });
    assert.match(await speed.getText(), /\d+ prompt tokens\/s on \d+ thread\(s\),\s+[\d.]+ generated tokens\/s on \d+; first token about [\d.]+ s/);
    assert.match(await (await browser.$(tid('models-auto'))).getText(), new RegExp(`auto model is ${chatModel.replace(/\./g, '\\.')}`));
    assert.ok(await (await llm.$(tid('model-auto'))).isExisting(), 'the default is auto\'s choice');
    // Where it runs: on CI's machine llama.cpp's Vulkan backend finds no GPU (lavapipe is a
    // CPU device, left out unless GGML_VK_VISIBLE_DEVICES names it).
    assert.match(await (await browser.$(tid('models-device'))).getText(), /^It runs on (the CPU: no GPU found|Vulkan\d+ \(.+\): .+)\.$/);

    // The seeded configuration answers with it: the engine refuses, naming who uses it.
    await (await llm.$(tid('model-remove'))).click();
    await (await llm.$(tid('model-remove-confirm'))).click();
    const error = await llm.$(tid('model-error'));
    await error.waitForDisplayed({ timeout: 10_000 });
    assert.match(await error.getText(), /used by orchestrator configuration default \(mode grounded\)/);
    assert.equal(await llm.getAttribute('data-verified'), 'true', 'nothing was removed');
  });

  it('installs a model from a loopback hub with progress, resumes a cancelled download, and refuses a corrupted copy', async () => {
    await openModels();
    const id = 'ms-marco-minilm-l6-v2';
    const row = await modelRow(id);
    assert.equal(await row.getAttribute('data-verified'), 'absent');
    await (await row.$(tid('model-install'))).click();
    const progress = await row.$(tid('model-progress'));
    await eventually(browser, 'download progress', async () => /model\.onnx · [\d.]+ [KM]i?B of/.test(await progress.getText()));
    await (await row.$(tid('model-cancel'))).click();
    const error = await row.$(tid('model-error'));
    await error.waitForDisplayed({ timeout: 20_000 });
    assert.match(await error.getText(), /cancelled after \d+ bytes/);

    // Installing again resumes where the download stopped.
    await (await row.$(tid('model-install'))).click();
    await eventually(browser, 'the model installed', async () => (await row.getAttribute('data-verified')) === 'true');
    assert.ok(hub.ranges > 0, 'the second download asked for the rest only');

    // The default pipeline reranks with it, saved as a new version.
    const reranker = await browser.$(tid('pipeline-reranker'));
    await reranker.selectByVisibleText(id);
    await (await browser.$(`${tid('pipeline-reranker-form')} button[type="submit"]`)).click();
    await eventually(browser, 'the reranker in use', async () => /retrieve-hybrid-coverage/.test(await row.getText()));

    // A copy whose hash does not match is refused, naming the file; the good copy stays.
    hub.corrupt = true;
    await (await row.$(tid('model-install'))).click();
    await error.waitForDisplayed({ timeout: 30_000 });
    assert.match(await error.getText(), /model\.onnx.*checksum mismatch/s);
    assert.equal(await row.getAttribute('data-verified'), 'true');
    hub.corrupt = false;
  });

  it('imports a GGUF chat model and deletes it', async () => {
    await openModels();
    const gguf = path.join(work, 'tiny-chat.gguf');
    fs.writeFileSync(gguf, Buffer.concat([Buffer.from('GGUF'), Buffer.alloc(4096)]));
    await (await browser.$(tid('model-import-kind'))).selectByAttribute('value', 'llm');
    await (await browser.$(tid('model-import-path'))).setValue(gguf);
    await (await browser.$(tid('model-import-id'))).setValue('tiny-chat');
    await (await browser.$(tid('model-import'))).click();
    const row = await modelRow('tiny-chat');
    await row.waitForExist({ timeout: 10_000 });
    assert.equal(await row.getAttribute('data-verified'), 'true');

    // Not a GGUF file: the error names it, and nothing is installed.
    await (await browser.$(tid('model-import-path'))).setValue(path.join(work, 'opener.sh'));
    await (await browser.$(tid('model-import-id'))).setValue('not-a-model');
    await (await browser.$(tid('model-import'))).click();
    const importError = await browser.$(tid('model-import-error'));
    await importError.waitForDisplayed({ timeout: 10_000 });
    assert.match(await importError.getText(), /opener\.sh.*not a GGUF file/s);

    await (await row.$(tid('model-remove'))).click();
    await (await row.$(tid('model-remove-confirm'))).click();
    await row.waitForExist({ reverse: true, timeout: 10_000 });
  });

  it('says what is wrong when the chat model is gone, and offers the fix', async () => {
    // A copy of the default model, chosen for chat, then deleted from disk behind the app.
    await openModels();
    const copy = path.join(work, 'smollm2-copy.gguf');
    fs.copyFileSync(path.join(repoRoot, 'models/cache/smollm2-135m-instruct-q4_1/model.gguf'), copy);
    await (await browser.$(tid('model-import-kind'))).selectByAttribute('value', 'llm');
    await (await browser.$(tid('model-import-path'))).setValue(copy);
    await (await browser.$(tid('model-import-id'))).setValue('smollm2-copy');
    await (await browser.$(tid('model-import'))).click();
    const row = await modelRow('smollm2-copy');
    await row.waitForExist({ timeout: 20_000 });
    await (await row.$('button=Use for chat')).click();
    await eventually(browser, 'the copy used by the assistant', async () => /the assistant/.test(await row.getText()));
    // In use by the assistant: not removed from here.
    await (await row.$(tid('model-remove'))).click();
    await (await row.$(tid('model-remove-confirm'))).click();
    await (await row.$(tid('model-error'))).waitForDisplayed({ timeout: 10_000 });
    fs.rmSync(path.join(modelsDir, 'smollm2-copy'), { recursive: true, force: true });

    await openChat();
    const problem = await browser.$(tid('chat-problem'));
    await problem.waitForDisplayed({ timeout: 10_000 });
    assert.match(await problem.getText(), /smollm2-copy/);
    assert.match(await problem.getText(), /quarry models import/);
    await (await browser.$(tid('chat-new'))).click();
    await ask('What do apple orchards need?');
    const turn = await finishedTurn(1);
    assert.match(await turn.getText(), /extractive/);
    await (await browser.$(tid('chat-use-extractive'))).click();
    await problem.waitForExist({ reverse: true, timeout: 10_000 });
    await chooseBackend('mode');
  });

  /** Replaces the code editor's text, as typing it would (without sending every key). */
  function typeCode(text) {
    return browser.execute((source) => {
      const view = document.querySelector('.cm-content').cmTile.root.view;
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: source } });
    }, text);
  }

  const toolItem = (slug) => browser.$(`${tid('tool-item')}[data-slug="${slug}"]`);
  // Opening a tool loads it; its tabs belong to it once its item is the active one.
  const openTool = async (slug) => {
    const item = await toolItem(slug);
    await item.click();
    await eventually(browser, `${slug} open`, async () => (await item.getAttribute('class')).includes('active'));
  };

  it('creates a code tool, shows a syntax error at its line, and derives the settings form once fixed', async () => {
    await (await browser.$(tid('nav-tools'))).click();
    await (await browser.$(tid('tool-new'))).click();
    await (await browser.$(tid('tool-new-type'))).selectByAttribute('value', 'query');
    await (await browser.$(tid('tool-new-slug'))).setValue('e2e-boost');
    await (await browser.$(tid('tool-new-name'))).setValue('Boosted query');
    await (await browser.$(tid('tool-new-create'))).click();
    await (await toolItem('e2e-boost')).waitForExist({ timeout: 20_000 });
    assert.match(await (await browser.$(tid('tool-type'))).getText(), /query, fixed/);
    await (await browser.$(tid('code-editor'))).waitForDisplayed();

    const header = 'from quarry import BaseModel, Field\n\n\nclass Settings(BaseModel):\n' +
      '    boost: float = Field(1.5, gt=0, le=10, description="Weight of the original query.")\n\n\n';
    const body = '    return {"kind": "query_variants", "queries": [{"query": input["query"], "weight": ctx.settings["boost"]}]}\n';
    // Line 8 lacks its colon: the engine's own derivation says so, at that line.
    await typeCode(`${header}async def run(input, ctx)\n${body}`);
    const problem = await browser.$(tid('tool-problem'));
    await problem.waitForDisplayed({ timeout: 30_000 });
    assert.equal(await problem.getAttribute('data-line'), '8');
    assert.match(await problem.getText(), /Line 8/);
    assert.ok(await browser.$('.cm-lint-marker-error').isExisting(), 'the gutter marks the line');

    await typeCode(`${header}async def run(input, ctx):\n${body}`);
    await problem.waitForExist({ reverse: true, timeout: 30_000 });
    const setting = await browser.$(`${tid('tool-setting')}[data-key="boost"]`);
    await setting.waitForExist({ timeout: 10_000 });
    assert.match(await setting.getText(), /Weight of the original query/);
    assert.equal(await (await setting.$('input')).getValue(), '1.5');

    await browser.keys(['Control', 's']);
    await (await browser.$(tid('tool-saved'))).waitForDisplayed({ timeout: 20_000 });
    assert.match(await (await browser.$(tid('tool-saved'))).getText(), /not|only/);
    assert.equal(await (await browser.$(tid('tool-version'))).getText(), '2');
    assert.match(await (await browser.$(tid('tool-hash'))).getText(), /^sha256:/);
    await (await browser.$(tid('tool-tab-history'))).click();
    assert.equal((await browser.$$(tid('tool-version-row'))).length, 2);
  });

  it('refuses a new egress origin on this machine until the administrator confirms it, and audits the confirmation', async () => {
    await openTool('e2e-boost');
    await (await browser.$(tid('tool-tab-definition'))).click();
    const egress = await browser.$(tid('tool-egress'));
    await egress.scrollIntoView();
    await egress.setValue('http://169.254.169.254');
    // The live check is the save's own: the metadata address is refused, naming it.
    const refused = await browser.$(`${tid('field-error')}[data-field="egress"]`);
    await refused.waitForDisplayed({ timeout: 30_000 });
    assert.match(await refused.getText(), /`http:\/\/169\.254\.169\.254`.*confirms/);
    const confirm = await browser.$(tid('tool-allow-private-egress'));
    await confirm.click();
    await refused.waitForExist({ reverse: true, timeout: 30_000 });
    await browser.keys(['Control', 's']);
    await eventually(browser, 'version 3 saved', async () =>
      (await (await browser.$(tid('tool-version'))).getText()).trim() === '3',
    );
    assert.equal(await confirm.isSelected(), false, 'a confirmation holds for one save');
    const records = await invoke('list_audit', { query: { action: 'tool.private_egress', target: 'e2e-boost' } });
    assert.equal(records.records.length, 1, JSON.stringify(records.records));
    assert.match(records.records[0].detail, /169\.254\.169\.254/);
  });

  it('tests a tool as a personal key, and shows the audit record the test wrote', async () => {
    const created = await invoke('create_key', {
      key: { name: 'e2e-tester', kind: 'personal', user: 'ana', scope: { collections: null, sensitivity_ceiling: 'internal' } },
    });
    assert.ok(created.secret, JSON.stringify(created));
    await (await browser.$(tid('nav-tools'))).click();
    await openTool('retrieve-lexical-focused');
    await (await browser.$(tid('tool-tab-test'))).click();
    await (await browser.$(tid('test-as-key'))).click();
    await (await browser.$(tid('test-key'))).setValue(created.secret);
    await typeInto(browser, await browser.$(tid('test-input')), '{"query": "lighthouse keeper"}');
    await (await browser.$(tid('test-run'))).click();
    const result = await browser.$(tid('test-result'));
    await result.waitForDisplayed({ timeout: 30_000 });
    assert.match(await (await browser.$(tid('test-principal'))).getText(), /e2e-tester/);
    assert.match(await (await browser.$(tid('test-output'))).getText(), /lighthouse/);
    const audit = await browser.$(tid('test-audit'));
    assert.match(await audit.getText(), /tool\.test retrieve-lexical-focused by .*e2e-tester/);
    assert.match(await audit.getText(), /\bok\b/);

    // The same record is in the Audit view, and it opens the tool it refers to.
    await (await audit.$('button')).click();
    const record = await browser.$(`${tid('audit-row')}[data-action="tool.test"][data-target="retrieve-lexical-focused"]`);
    await record.waitForExist({ timeout: 10_000 });
    assert.match(await record.getText(), /e2e-tester/);
    await (await record.$(tid('audit-open'))).click();
    await (await browser.$(tid('audit-open-tool'))).click();
    const opened = await toolItem('retrieve-lexical-focused');
    await opened.waitForExist({ timeout: 10_000 });
    await eventually(browser, 'the tool open again', async () => (await opened.getAttribute('class')).includes('active'));
  });

  it('refuses to give a tool another type, and to delete one a pipeline uses', async () => {
    await (await browser.$(tid('nav-tools'))).click();
    await openTool('retrieve-hybrid-coverage');
    await (await browser.$(tid('tool-duplicate'))).click();
    const slug = await browser.$(tid('tool-dup-slug'));
    await slug.clearValue();
    await slug.setValue('hybrid-as-query');
    await (await browser.$(tid('tool-dup-type'))).selectByAttribute('value', 'query');
    await (await browser.$(tid('tool-dup-run'))).click();
    const error = await browser.$(tid('tool-error'));
    await error.waitForDisplayed({ timeout: 10_000 });
    assert.match(await error.getText(), /cannot be duplicated as a .?query.? tool/);
    assert.equal(await (await toolItem('hybrid-as-query')).isExisting(), false);

    await (await browser.$(tid('tool-delete'))).click();
    await (await browser.$(tid('tool-delete-confirm'))).click();
    const refused = await browser.$(tid('tool-delete-refused'));
    await refused.waitForDisplayed({ timeout: 10_000 });
    assert.match(await refused.getText(), /default/);
    assert.ok(await (await toolItem('retrieve-hybrid-coverage')).isExisting(), 'the tool is still there');
    // Its link opens the pipeline that uses it.
    await (await browser.$(tid('tool-delete-pipeline'))).click();
    await (await browser.$(tid('pipeline-tab-stages'))).waitForDisplayed({ timeout: 10_000 });
  });

  const problems = async (severity) => (await browser.$$(`${tid('pipeline-problem')}[data-severity="${severity}"]`)).length;

  it('builds a pipeline from the seeded tools, checks readiness, and runs the tester through every stage', async () => {
    await (await browser.$(tid('nav-pipelines'))).click();
    await (await browser.$(tid('pipeline-new-name'))).setValue('e2e-pipe');
    await (await browser.$(tid('pipeline-create'))).click();
    await (await browser.$(`${tid('pipeline-stages')}[data-pipeline="e2e-pipe"]`)).waitForExist({ timeout: 20_000 });
    // No retrieval tool yet: the readiness check says so before anything runs.
    await eventually(browser, 'a blocking readiness problem', async () => (await problems('blocking')) > 0);

    await (await browser.$(tid('stage-retrieval'))).selectByAttribute('value', 'retrieve-lexical-focused');
    await eventually(browser, 'no blocking problem', async () => (await problems('blocking')) === 0);
    await (await browser.$(tid('stage-add-query'))).selectByAttribute('value', 'expand_multi_query');
    await (await browser.$(`${tid('stage-query-item')}[data-slug="expand_multi_query"]`)).waitForExist({ timeout: 10_000 });
    await (await browser.$(tid('stage-add-chunk'))).selectByAttribute('value', 'noop_chunk');
    await (await browser.$(`${tid('stage-chunk-item')}[data-slug="noop_chunk"]`)).waitForExist({ timeout: 10_000 });
    assert.ok((await browser.$$(tid('pipeline-change'))).length > 0, 'the draft differs from nothing saved');
    await (await browser.$(tid('pipeline-save'))).click();
    const version = await browser.$(`${tid('pipeline-item')}[data-name="e2e-pipe"] ${tid('pipeline-version')}`);
    await version.waitForExist({ timeout: 10_000 });
    assert.equal(await version.getText(), 'v1');

    await (await browser.$(tid('pipeline-tab-tester'))).click();
    const query = await browser.$(tid('tester-query'));
    await query.waitForDisplayed({ timeout: 10_000 });
    await query.setValue('lighthouse keeper');
    await browser.keys(['Control', 'Enter']);
    const run = await browser.$(tid('tester-run'));
    await run.waitForExist({ timeout: 60_000 });
    const stages = [];
    for (const stage of await browser.$$(tid('tester-stage'))) {
      stages.push(`${await stage.getAttribute('data-stage')}:${await stage.getAttribute('data-tool')}`);
    }
    assert.deepEqual(stages, [
      'query:expand_multi_query',
      'retrieval:retrieve-lexical-focused',
      'chunk:noop_chunk',
      'evidence:',
    ]);
    const candidates = await browser.$$(tid('tester-candidate'));
    assert.ok(candidates.length > 0, 'the retrieval stage lists its candidates');
    assert.match(await candidates[0].getAttribute('data-path'), /lighthouse\.md$/);
    const evidence = await browser.$(tid('tester-evidence'));
    await evidence.click();
    await (await browser.$(tid('preview-focus'))).waitForDisplayed({ timeout: 10_000 });
    assert.match(await (await browser.$(tid('preview-focus'))).getText(), /keeper/);
  });

  it('scores a labelled set in the tester with the same figures as quarry eval', async () => {
    const set = path.join(work, 'tiny-beir');
    fs.mkdirSync(path.join(set, 'qrels'), { recursive: true });
    fs.writeFileSync(
      path.join(set, 'corpus.jsonl'),
      [
        { _id: 'd1', title: 'Lighthouse', text: 'The keeper trims the wick at dusk and sounds the fog horn.' },
        { _id: 'd2', title: 'Orchard', text: 'Apple trees need cross-pollination from a second variety.' },
        { _id: 'd3', title: 'Bread', text: 'Feed the sourdough starter twice a day until it doubles.' },
        { _id: 'd4', title: 'Fog', text: 'Fog rolls in from the sea; the horn sounds every thirty seconds.' },
      ].map((d) => JSON.stringify(d)).join('\n') + '\n',
    );
    fs.writeFileSync(
      path.join(set, 'queries.jsonl'),
      [
        { _id: 'q1', text: 'fog horn' },
        { _id: 'q2', text: 'sourdough starter' },
        { _id: 'q3', text: 'pollination of apple trees' },
      ].map((q) => JSON.stringify(q)).join('\n') + '\n',
    );
    fs.writeFileSync(path.join(set, 'qrels/test.tsv'), 'query-id\tcorpus-id\tscore\nq1\td4\t2\nq1\td1\t1\nq2\td3\t1\nq3\td2\t1\n');

    await (await browser.$(tid('nav-pipelines'))).click();
    await (await browser.$(tid('pipeline-tab-evaluate'))).click();
    await typeInto(browser, await browser.$(tid('eval-set')), set);
    for (const mode of ['vector', 'hybrid']) {
      const box = await browser.$(tid(`eval-mode-${mode}`));
      if (await box.isSelected()) await box.click();
    }
    const lexical = await browser.$(tid('eval-mode-lexical'));
    if (!(await lexical.isSelected())) await lexical.click();
    for (const box of await browser.$$(tid('eval-pipeline'))) {
      const wanted = (await box.getAttribute('data-name')) === 'e2e-pipe';
      if ((await box.isSelected()) !== wanted) await box.click();
    }
    await (await browser.$(tid('eval-run'))).click();
    const row = (name) => browser.$(`${tid('eval-row')}[data-name="${name}"]`);
    await (await row('pipeline e2e-pipe')).waitForExist({ timeout: 120_000 });
    assert.ok(await (await browser.$(tid('eval-chart'))).isExisting(), 'a bar chart of the rows');
    assert.equal((await browser.$$(tid('eval-query'))).length, 3, 'each judged query is listed');

    const cli = spawnSync(
      path.join(repoRoot, 'target', 'debug', 'quarry'),
      ['eval', '--beir', set, '--mode', 'lexical', '--pipeline', 'e2e-pipe', '--json'],
      { env: { ...process.env, QUARRY_DATA_DIR: dataDir }, encoding: 'utf8' },
    );
    assert.equal(cli.status, 0, cli.stderr);
    for (const expected of JSON.parse(cli.stdout)) {
      const shown = await row(expected.name);
      assert.ok(await shown.isExisting(), `the GUI has the row ${expected.name}`);
      for (const [cell, metric] of [['eval-ndcg', 'ndcg_at_10'], ['eval-recall', 'recall_at_100'], ['eval-mrr', 'mrr_at_10']]) {
        assert.equal(await (await shown.$(tid(cell))).getText(), expected[metric].toFixed(4), `${expected.name} ${metric}`);
      }
    }
  });

  it('removes the folder, and its documents leave the results', async () => {
    await (await browser.$(tid('nav-library'))).click();
    const row = await sourceRow();
    await (await row.$(tid('source-remove'))).click();
    await (await row.$(tid('source-remove-confirm'))).click();
    await row.waitForExist({ reverse: true, timeout: 20_000, timeoutMsg: 'the source row stayed' });

    await search('lighthouse keeper');
    await chooseMode('hybrid');
    await (await browser.$(tid('search-empty'))).waitForDisplayed({ timeout: 20_000 });
    assert.deepEqual(await resultPaths(), []);
  });
});
