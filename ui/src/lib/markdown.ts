// Answers as safe HTML: Markdown without raw HTML (markdown-it escapes every tag a model or a
// document wrote), without links or images (an answer links only through its citations), code
// blocks highlighted, and each `[n]` of a citation turned into a chip the view wires up.
import MarkdownIt from 'markdown-it';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import yaml from 'highlight.js/lib/languages/yaml';
import type { Citation } from './api';

for (const [name, language] of Object.entries({ bash, javascript, json, python, rust, sql, typescript, yaml })) {
  hljs.registerLanguage(name, language);
}

const md = new MarkdownIt({
  html: false,
  linkify: false,
  typographer: false,
  highlight(code, lang) {
    if (!lang || !hljs.getLanguage(lang)) return '';
    // hljs escapes the code itself; markdown-it wraps it in <pre><code>.
    return hljs.highlight(code, { language: lang, ignoreIllegals: true }).value;
  },
});
// No link or image is ever rendered as one: its text stays, its address goes.
md.validateLink = () => false;

/** A citation chip's HTML (digits only: nothing a model wrote reaches an attribute). */
function chip(n: number): string {
  return `<button type="button" class="cite" data-n="${n}" data-testid="citation" aria-label="Source ${n}">${n}</button>`;
}

/**
 * `text` rendered, with the `[n]` markers of `citations` as chips. Markers inside code stay
 * as written; markers of passages the answer does not cite stay text.
 */
export function renderAnswer(text: string, citations: Citation[]): string {
  const cited = new Set(citations.map((c) => c.n));
  const html = md.render(text);
  let inCode = 0;
  // Tags and text alternate; only text outside <code> is touched.
  return html
    .split(/(<[^>]+>)/)
    .map((piece) => {
      if (piece.startsWith('<')) {
        if (/^<code\b/.test(piece)) inCode += 1;
        else if (piece === '</code>') inCode = Math.max(0, inCode - 1);
        return piece;
      }
      if (inCode > 0) return piece;
      return piece.replace(/\[(\d+)\]/g, (marker, digits: string) => {
        const n = Number(digits);
        return cited.has(n) ? chip(n) : marker;
      });
    })
    .join('');
}
