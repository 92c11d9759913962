import http from 'node:http';
import { gunzipSync } from 'node:zlib';
import { expect } from 'chai';
import { get } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// How the web tier serves the console: one shell for every page under a strict
// Content-Security-Policy and never cached, content-hashed files cached for good, and `/` sending
// a browser to the console while an API client gets JSON.

const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';
const PAGES = [
  '/console/',
  '/console/usage',
  '/console/models',
  '/console/keys',
  '/console/key',
  '/console/billing',
  '/console/account',
  '/console/sign-in',
  '/console/sign-up',
];

/** The hashed script and stylesheet the shell names. */
const assetsIn = (html: string): string[] =>
  [...html.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)].map((m) => m[1]!);

describe('the console’s pages and files (web tier)', () => {
  let web: TestWeb;
  before(async () => {
    web = await startTestWeb();
  });
  after(async () => {
    await web?.close();
  });

  it('answers every console page with the same HTML shell, never stored, under the strict policy', async () => {
    const shells = new Set<string>();
    for (const page of PAGES) {
      const r = await get(`${web.url}${page}`, { headers: { accept: BROWSER } });
      expect(r.status, page).to.equal(200);
      expect(r.headers.get('content-type')).to.match(/^text\/html/);
      expect(r.headers.get('cache-control')).to.equal('no-store');
      const csp = r.headers.get('content-security-policy')!;
      for (const directive of [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
        "base-uri 'none'",
      ])
        expect(csp, page).to.include(directive);
      expect(csp).not.to.match(/unsafe-inline|unsafe-eval|https?:/);
      expect(r.headers.get('x-content-type-options')).to.equal('nosniff');
      shells.add(r.text);
    }
    expect(shells.size).to.equal(1);
  });

  it('puts no inline script, inline style or outside origin in the shell', async () => {
    const { text } = await get(`${web.url}/console/`);
    const scripts = [...text.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts).to.have.length(1);
    expect(scripts[0]![1]).to.match(/type="module" src="\/console\/assets\/console-[A-Z0-9]+\.js"/);
    expect(scripts[0]![2]).to.equal('');
    expect(text).not.to.match(/<style|\sstyle=|\son[a-z]+=|javascript:/i);
    expect(text).not.to.match(/(src|href)="(https?:)?\/\//);
  });

  it('serves the hashed script and stylesheet for a year, immutable, with their types', async () => {
    const { text } = await get(`${web.url}/console/`);
    const assets = assetsIn(text);
    expect(assets).to.have.length(2);
    for (const asset of assets) {
      const r = await get(`${web.url}${asset}`);
      expect(r.status, asset).to.equal(200);
      expect(r.headers.get('cache-control')).to.equal('public, max-age=31536000, immutable');
      expect(r.headers.get('content-type')).to.match(asset.endsWith('.js') ? /^text\/javascript/ : /^text\/css/);
      expect(r.text.length).to.be.greaterThan(1000);
    }
  });

  it('sends a client that takes gzip the build’s gzipped copy of each file, and one that does not the file itself', async () => {
    const { text } = await get(`${web.url}/console/`);
    /** Raw bytes and headers: fetch would decompress on its own. */
    const raw = (asset: string, encoding: string) =>
      new Promise<{ headers: http.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
        http
          .get(`${web.url}${asset}`, { headers: { 'accept-encoding': encoding } }, (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }));
          })
          .on('error', reject);
      });
    for (const asset of assetsIn(text)) {
      const [zipped, plain] = await Promise.all([raw(asset, 'gzip, deflate, br'), raw(asset, 'identity')]);
      expect(zipped.headers['content-encoding'], asset).to.equal('gzip');
      expect(zipped.headers.vary).to.match(/accept-encoding/i);
      expect(plain.headers['content-encoding'], asset).to.equal(undefined);
      expect(gunzipSync(zipped.body).equals(plain.body), asset).to.equal(true);
      expect(zipped.body.length).to.be.below(plain.body.length / 2);
    }
  });

  it('answers an unknown or malformed asset name with a 404 envelope, never a file outside the folder', async () => {
    for (const name of ['console-NOPE.js', 'manifest.json', '..%2Fmanifest.json', '..%2F..%2Fpackage.json', 'x.map']) {
      const r = await get(`${web.url}/console/assets/${name}`);
      expect(r.status, name).to.equal(404);
      expect(r.body.error.type).to.equal('not_found_error');
    }
  });

  it('sends a browser at / to the console with a 303', async () => {
    const r = await get(`${web.url}/`, { headers: { accept: BROWSER }, redirect: 'manual' });
    expect(r.status).to.equal(303);
    expect(r.headers.get('location')).to.equal('/console/');
  });

  it('answers an API client at / with JSON naming the API, its documents and the console', async () => {
    for (const accept of [undefined, 'application/json', '*/*']) {
      const r = await get(`${web.url}/`, { headers: accept ? { accept } : {}, redirect: 'manual' });
      expect(r.status, String(accept)).to.equal(200);
      expect(r.body).to.deep.equal({
        object: 'service',
        api: '/v1',
        openapi: '/openapi.json',
        docs: '/docs',
        console: '/console/',
      });
    }
  });

  it('keeps unknown console paths a 404 (only the pages are the shell)', async () => {
    const r = await get(`${web.url}/console/nope`, { headers: { accept: BROWSER } });
    expect(r.status).to.equal(404);
  });
});
