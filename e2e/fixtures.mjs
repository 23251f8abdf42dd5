// The corpus the end-to-end tests index, written fresh for each run.
import fs from 'node:fs';
import path from 'node:path';

/** A one-page PDF whose text is `text` (Helvetica, a correct xref table). */
export function pdfWithText(text) {
  const escaped = text.replace(/[\\()]/g, (c) => `\\${c}`);
  const content = `BT /F1 18 Tf 72 700 Td (${escaped}) Tj ET`;
  const objects = [
    '<< /Type /Catalog /Pages 2 0 R >>',
    '<< /Type /Pages /Kids [3 0 R] /Count 1 >>',
    '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>',
    `<< /Length ${content.length} >>\nstream\n${content}\nendstream`,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>',
  ];
  let body = '%PDF-1.4\n';
  const offsets = [];
  objects.forEach((object, i) => {
    offsets.push(body.length);
    body += `${i + 1} 0 obj\n${object}\nendobj\n`;
  });
  const xref = body.length;
  body += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n`;
  for (const offset of offsets) body += `${String(offset).padStart(10, '0')} 00000 n \n`;
  body += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return Buffer.from(body, 'latin1');
}

/** Same size as `good`, but not a PDF anyone can read. */
export function brokenLike(good) {
  const broken = Buffer.alloc(good.length, 0x20);
  Buffer.from('%PDF-1.4\nthis file was cut short by a failing disk\n').copy(broken);
  return broken;
}

/** A fixed modification time (whole seconds, so it can be set again exactly). */
export const FIXED_MTIME = 1_700_000_000;

export const RETRY_TEXT = 'Quokkas were counted on Rottnest Island';

export function writeCorpus(dir) {
  fs.mkdirSync(path.join(dir, 'guides'), { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'lighthouse.md'),
    '# Lighthouse keeping\n\nThe lighthouse keeper trims the wick at dusk.\n\n' +
      '## Fog signals\n\nWhen fog rolls in, the keeper sounds the horn every thirty seconds.\n',
  );
  fs.writeFileSync(
    path.join(dir, 'guides/orchard.txt'),
    'Apple orchards need cross-pollination: plant two varieties that flower together.\n',
  );
  fs.writeFileSync(
    path.join(dir, 'guides/bread.md'),
    '# Sourdough\n\nFeed the starter twice a day; a ripe starter doubles in six hours.\n',
  );
  const broken = path.join(dir, 'survey.pdf');
  fs.writeFileSync(broken, brokenLike(pdfWithText(RETRY_TEXT)));
  fs.utimesSync(broken, FIXED_MTIME, FIXED_MTIME);
  return { broken };
}

/** Mends the broken PDF without changing its size or modification time, so only a retry
 * (not the watcher) reads it again. */
export function mendQuietly(file) {
  fs.writeFileSync(file, pdfWithText(RETRY_TEXT));
  fs.utimesSync(file, FIXED_MTIME, FIXED_MTIME);
}

/**
 * A loopback OpenAI-compatible server that streams `text` a word every `everyMs` (a one-token
 * request, the app's backend check, is answered at once). Resolves to `{url, authorizations,
 * close}`.
 */
export async function slowChatServer(text, everyMs) {
  const { createServer } = await import('node:http');
  const authorizations = [];
  const server = createServer((req, res) => {
    authorizations.push(req.headers.authorization ?? null);
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      if (req.method !== 'POST' || !req.url.endsWith('/chat/completions')) {
        res.writeHead(404).end();
        return;
      }
      const request = JSON.parse(body || '{}');
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
      const words = request.max_tokens === 1 ? ['OK'] : text.split(/(?<= )/);
      let i = 0;
      const next = () => {
        if (res.destroyed) return;
        if (i === words.length) {
          res.end('data: [DONE]\n\n');
          return;
        }
        const delta = { choices: [{ index: 0, delta: { content: words[i++] } }] };
        res.write(`data: ${JSON.stringify(delta)}\n\n`);
        setTimeout(next, request.max_tokens === 1 ? 0 : everyMs);
      };
      next();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/v1`,
    /** The Authorization header of every request, in order. */
    authorizations,
    close: () => new Promise((resolve) => server.close(resolve) && server.closeAllConnections()),
  };
}

/**
 * A loopback stand-in for the model hub (`QUARRY_HF_ENDPOINT`): every file is `size` bytes of
 * its own name repeated, sent 64 KiB every `everyMs`, with ranges for resumed downloads and the
 * content's sha256 in `X-Linked-Etag`, as the hub sends it. `corrupt = true` makes it send a
 * hash that does not match. Resolves to `{url, ranges, close, set corrupt}`.
 */
export async function fakeHub({ size = 4 << 20, everyMs = 40 } = {}) {
  const { createServer } = await import('node:http');
  const { createHash } = await import('node:crypto');
  const hub = { ranges: 0, corrupt: false };
  const server = createServer((req, res) => {
    const match = /\/resolve\/[^/]+\/(.+)$/.exec(req.url);
    if (req.method !== 'GET' || !match) {
      res.writeHead(404).end();
      return;
    }
    const name = decodeURIComponent(match[1]);
    const bytes = name.endsWith('.onnx') ? size : 4096;
    const body = Buffer.alloc(bytes, `${name} `);
    const sha = createHash('sha256').update(body).digest('hex');
    const etag = hub.corrupt ? sha.replace(/^./, (c) => (c === '0' ? '1' : '0')) : sha;
    const from = Number(/bytes=(\d+)-/.exec(req.headers.range ?? '')?.[1] ?? 0);
    if (from > 0) hub.ranges++;
    const headers = { 'Content-Length': String(bytes - from), 'X-Linked-Etag': `"${etag}"` };
    if (from > 0) headers['Content-Range'] = `bytes ${from}-${bytes - 1}/${bytes}`;
    res.writeHead(from > 0 ? 206 : 200, headers);
    let at = from;
    const next = () => {
      if (res.destroyed) return;
      if (at >= bytes) {
        res.end();
        return;
      }
      const end = Math.min(bytes, at + (64 << 10));
      res.write(body.subarray(at, end));
      at = end;
      setTimeout(next, everyMs);
    };
    next();
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  hub.url = `http://127.0.0.1:${server.address().port}`;
  hub.close = () => new Promise((resolve) => server.close(resolve) && server.closeAllConnections());
  return hub;
}

/**
 * llama.cpp's `llama-server` (built by scripts/llama-server.sh) serving SmolLM2 on loopback.
 * Resolves to `{url, stop}` once it reports healthy.
 */
export async function llamaServer(repoRoot) {
  const { spawn } = await import('node:child_process');
  const net = await import('node:net');
  const binary = path.join(repoRoot, 'target/llama-server/bin/llama-server');
  const model = path.join(repoRoot, 'models/cache/smollm2-135m-instruct-q4_1/model.gguf');
  for (const needed of [binary, model]) {
    if (!fs.existsSync(needed)) throw new Error(`${needed} is missing: run scripts/llama-server.sh and scripts/provision.sh`);
  }
  const port = await new Promise((resolve) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const { port: p } = probe.address();
      probe.close(() => resolve(p));
    });
  });
  const child = spawn(
    binary,
    ['--host', '127.0.0.1', '--port', String(port), '-m', model, '--alias', 'smollm2', '-c', '4096', '-np', '1', '-t', '1', '--jinja', '--no-webui'],
    { stdio: 'ignore' },
  );
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`llama-server exited with ${child.exitCode}`);
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error('llama-server did not report healthy within 120 s');
    await new Promise((r) => setTimeout(r, 250));
  }
  return {
    url: `http://127.0.0.1:${port}/v1`,
    stop: () => new Promise((resolve) => (child.exitCode !== null ? resolve() : (child.once('exit', resolve), child.kill()))),
  };
}
