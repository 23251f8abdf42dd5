// @vitest-environment happy-dom
// An answer is text a model wrote from documents anyone could have written: whatever it holds,
// the rendered HTML may carry no markup, link or image of its own, only Quarry's citation chips.
import { describe, expect, test } from 'vitest';
import type { Citation } from './api';
import { renderAnswer } from './markdown';

/** Citations numbered `ns` (only the number matters to rendering). */
const cited = (...ns: number[]) => ns.map((n) => ({ n }) as Citation);

/** The rendered answer parsed, as the view would hold it. */
function dom(text: string, citations: Citation[] = []): DocumentFragment {
  const template = document.createElement('template');
  template.innerHTML = renderAnswer(text, citations);
  return template.content;
}

const chips = (f: DocumentFragment) =>
  [...f.querySelectorAll('button.cite')].map((b) => (b as HTMLElement).dataset.n);

describe('renderAnswer', () => {
  test('raw HTML stays text', () => {
    const f = dom('<script>alert(1)</script> hi <img src=x onerror=alert(1)> <a href="x">raw</a>');
    expect(f.querySelector('script, img, a, [onerror]')).toBeNull();
    expect(f.textContent).toContain('<script>alert(1)</script>');
    expect(f.textContent).toContain('<img src=x onerror=alert(1)>');
  });

  test('no link is ever rendered, whatever its scheme', () => {
    for (const link of [
      '[click](javascript:alert(1))',
      '[site](https://example.com)',
      '[data](data:text/html;base64,PHNjcmlwdD4=)',
      '<https://example.com/a>',
      'see https://example.com',
      '[ref]\n\n[ref]: https://example.com',
    ]) {
      const f = dom(link);
      expect(f.querySelector('a, [href]'), link).toBeNull();
    }
    expect(dom('[click](javascript:alert(1))').textContent).toContain('javascript:alert(1)');
  });

  test('images stay text, so nothing is fetched', () => {
    const f = dom('![alt text](https://example.com/x.png)');
    expect(f.querySelector('img, [src]')).toBeNull();
    expect(f.textContent).toContain('![alt text](https://example.com/x.png)');
  });

  test('cited markers become chips; others and those inside code stay as written', () => {
    const f = dom('Text [1] and `[2]` and [3].\n\n```rust\nlet x = v[1];\n```', cited(1, 2));
    expect(chips(f)).toEqual(['1']);
    expect(f.querySelector('p code')?.textContent).toBe('[2]');
    expect(f.querySelector('p')?.textContent).toContain('[3]');
    expect(f.querySelector('pre code')?.textContent).toBe('let x = v[1];\n');
  });

  test('adjacent markers are two chips; chip attributes hold digits only', () => {
    const f = dom('**bold** [1][2]', cited(1, 2));
    expect(chips(f)).toEqual(['1', '2']);
    for (const chip of f.querySelectorAll('button.cite')) {
      expect(chip.getAttribute('aria-label')).toMatch(/^Source \d+$/);
    }
  });

  test('code nested in a list stays code, and the text after it still gets chips', () => {
    const f = dom('- a\n  ```\n  nested [1]\n  ```\n- b [2]', cited(1, 2));
    expect(f.querySelector('li pre code')?.textContent).toBe('nested [1]\n');
    expect(chips(f)).toEqual(['2']);
  });

  test('known languages are highlighted; unknown ones are escaped text', () => {
    const rust = dom('```rust\nfn main() {}\n```');
    expect(rust.querySelector('code.language-rust .hljs-keyword')?.textContent).toBe('fn');
    const other = dom('```brainfudge\n<b>x</b>\n```');
    expect(other.querySelector('b')).toBeNull();
    expect(other.querySelector('pre code')?.textContent).toBe('<b>x</b>\n');
  });
});
