// `.env` for npm start, npm test, npm run bench and the scripts (migrate, mint-jwt, run-job): the
// file in the current directory (npm runs scripts from the project root), loaded with Node's own
// loader (process.loadEnvFile) when it exists. A variable already set in the environment keeps its
// value. Imported first by the .mjs entry points, preloaded (node --import) by the built scripts,
// so it runs before anything reads the environment; it says what it did in one line on stderr.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parseEnv } from 'node:util';

/** Loads `file` into process.env when it exists; returns the line saying what it did, or undefined. */
export function loadEnvFile(file = path.resolve('.env')) {
  if (!existsSync(file)) return undefined;
  // Node's parser names the variables (for the line); Node's loader sets them, leaving set ones alone.
  const names = Object.keys(parseEnv(readFileSync(file, 'utf8')));
  const kept = names.filter((name) => process.env[name] !== undefined);
  process.loadEnvFile(file);
  const loaded = names.filter((name) => !kept.includes(name));
  const shown = path.relative(process.cwd(), file) || file;
  return (
    `[env] loaded ${shown}: ${loaded.length ? loaded.join(', ') : 'no variable that was not already set'}` +
    (kept.length ? `; already set in the environment, so kept: ${kept.join(', ')}` : '')
  );
}

try {
  const line = loadEnvFile();
  if (line) process.stderr.write(`${line}\n`);
} catch (err) {
  process.stderr.write(`[env] could not load .env: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
