import { mkdir, readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { expect } from 'chai';
import type { Page } from 'playwright-core';
import { eventually } from './http.js';

// A console page in the browser: settled, checked by axe-core at phone and desktop width, and
// photographed at both. The same checks as test/e2e/console-journey.test.ts makes of its pages.

export const WIDTHS = [375, 1280] as const;
const AXE_SOURCE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');

interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: string[] }[];
}

/** axe-core run inside the page (its source evaluated there: the page's CSP allows no injected script tag). */
export async function seriousViolations(page: Page): Promise<string[]> {
  if (!(await page.evaluate('typeof window.axe !== "undefined"')))
    await page.evaluate(await readFile(AXE_SOURCE, 'utf8'));
  const violations = await page.evaluate<AxeViolation[]>(
    'axe.run(document, { resultTypes: ["violations"] }).then((r) => r.violations)',
  );
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

/** Waits for the page to settle: its heading, and no "Loading…" left. */
export async function settled(page: Page): Promise<void> {
  await page.locator('main h1').waitFor();
  await page.locator('main').filter({ hasText: 'Loading' }).waitFor({ state: 'detached' });
}

/**
 * At both widths: no serious axe violation, nothing wider than the screen, and a full-page
 * screenshot `<dir>/<name>-<width>.png`.
 */
export async function recordPage(page: Page, dir: string, name: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (const width of WIDTHS) {
    await page.setViewportSize({ width, height: width === 375 ? 812 : 900 });
    await settled(page);
    expect(await seriousViolations(page), `${name} at ${width} px`).to.deep.equal([]);
    expect(
      await page.evaluate('document.documentElement.scrollWidth'),
      `${name}: no sideways scroll at ${width} px`,
    ).to.equal(width);
    await page.screenshot({ path: path.join(dir, `${name}-${width}.png`), fullPage: true });
  }
}

/**
 * Waits until `expression`, evaluated in the page, gives `expected`. Polled with page.evaluate,
 * which the console's CSP does not govern: page.waitForFunction's own polling evaluates its string
 * in the page, which script-src 'self' refuses as soon as the first check is false.
 */
export const pageReads = (page: Page, expression: string, expected: unknown): Promise<true> =>
  eventually(
    async () => ((await page.evaluate(expression)) === expected ? true : undefined),
    `${expression} to be ${String(expected)}`,
  );
