// Builds the console (console/, a Preact single-page app) with esbuild into <OUT_DIR>/console/:
// hashed files under assets/ (cached for good by the web tier) and manifest.json naming the entry
// script and stylesheet for the page shell. Called by build() in scripts/lib/setup.mjs, so
// `npm start` and `npm test` build it; no command of its own. Run as a script: node scripts/build-console.mjs <out dir>.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { constants, gzipSync } from 'node:zlib';
import { buildSync } from 'esbuild';

/** Builds into `outDir`/console and returns the manifest ({ script, stylesheet }, paths under /console/assets/). */
export function buildConsole(root, outDir) {
  const target = path.join(outDir, 'console');
  const assets = path.join(target, 'assets');
  // Old hashed files would pile up build after build: the folder holds exactly this build.
  rmSync(target, { recursive: true, force: true });
  mkdirSync(assets, { recursive: true });
  const result = buildSync({
    absWorkingDir: root,
    entryPoints: { console: 'console/main.tsx', styles: 'console/styles.css' },
    outdir: assets,
    bundle: true,
    // ES modules with splitting: the chart library loads only with the usage page.
    format: 'esm',
    splitting: true,
    minify: true,
    sourcemap: false,
    target: ['es2020', 'chrome100', 'firefox100', 'safari15'],
    entryNames: '[name]-[hash]',
    chunkNames: 'chunk-[hash]',
    assetNames: '[name]-[hash]',
    jsx: 'automatic',
    jsxImportSource: 'preact',
    metafile: true,
    legalComments: 'none',
    logLevel: 'warning',
  });
  const manifest = {};
  for (const [file, out] of Object.entries(result.metafile.outputs)) {
    const name = path.basename(file);
    // A gzipped copy beside each file, made once here at the best level, so the web tier sends a
    // phone a fifth of the bytes without compressing on every request.
    const full = path.join(assets, name);
    writeFileSync(`${full}.gz`, gzipSync(readFileSync(full), { level: constants.Z_BEST_COMPRESSION }));
    if (out.entryPoint === 'console/main.tsx') manifest.script = name;
    if (out.entryPoint === 'console/styles.css') manifest.stylesheet = name;
  }
  if (!manifest.script || !manifest.stylesheet) throw new Error('console build: entry outputs missing');
  writeFileSync(path.join(target, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  buildConsole(root, path.resolve(root, process.argv[2] ?? 'dist'));
}
