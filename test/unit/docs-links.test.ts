import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { anchorsOf } from '../support/markdown.js';
import { PROJECT_ROOT } from '../support/project.js';

// The README is what a newcomer reads first, so it stays a few screens long; the rest lives in
// docs/, one page per subject, and the pages link to each other and into the code.
const README_MAX_BYTES = 12 * 1024;

interface Link {
  file: string;
  line: number;
  target: string;
}

const pages = (): string[] => [
  'README.md',
  ...readdirSync(path.join(PROJECT_ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => path.join('docs', f)),
];

/** Markdown outside fenced code blocks, with inline code blanked out (a link there is an example). */
function proseLines(text: string): string[] {
  let fenced = false;
  return text.split('\n').map((line) => {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      return '';
    }
    return fenced ? '' : line.replace(/`[^`]*`/g, (code) => ' '.repeat(code.length));
  });
}

/** Every inline link and image target: `[text](target)` or `[text](target "title")`. */
function linksOf(file: string): Link[] {
  const links: Link[] = [];
  proseLines(readFileSync(path.join(PROJECT_ROOT, file), 'utf8')).forEach((line, i) => {
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
      links.push({ file, line: i + 1, target: m[1]! });
  });
  return links;
}

const isExternal = (target: string): boolean => /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//');

describe('the documentation', () => {
  it(`keeps README.md under ${README_MAX_BYTES} bytes`, () => {
    const size = statSync(path.join(PROJECT_ROOT, 'README.md')).size;
    expect(size, `README.md is ${size} bytes: move detail into docs/`).to.be.below(README_MAX_BYTES);
  });

  it('has pages in docs/ to link to', () => {
    expect(pages().length).to.be.greaterThan(1);
  });

  it('links only to files that exist, and to headings those files have', () => {
    const broken: string[] = [];
    for (const page of pages()) {
      for (const link of linksOf(page).filter((l) => !isExternal(l.target))) {
        const [rawPath = '', anchor] = link.target.split('#', 2);
        const target =
          rawPath === ''
            ? path.join(PROJECT_ROOT, page)
            : path.resolve(PROJECT_ROOT, path.dirname(page), decodeURIComponent(rawPath));
        const where = `${link.file}:${link.line} -> ${link.target}`;
        if (!target.startsWith(PROJECT_ROOT + path.sep) && target !== PROJECT_ROOT)
          broken.push(`${where} (outside the repository)`);
        else if (!existsSync(target)) broken.push(`${where} (no such file)`);
        else if (anchor && target.endsWith('.md') && !anchorsOf(target).has(anchor))
          broken.push(`${where} (no such heading)`);
      }
    }
    expect(broken, broken.join('\n')).to.deep.equal([]);
  });
});
