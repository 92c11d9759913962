import { randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';

// A development machine's JWT secret: random, made on first start, kept in a file only its owner
// can read, and the same for every process of one checkout (they all read the one file).

export type LocalSecret = { secret: string } | { problem: string };

/**
 * The secret in `file`, made now if the file does not exist. Creation is safe when several
 * processes start at once: each writes a whole file of its own and links it into place; the
 * first link wins and every process reads the winner's.
 */
export function readOrCreateLocalSecret(file: string): LocalSecret {
  const existing = readLocalSecret(file);
  if (existing !== undefined) return existing;
  try {
    mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    const draft = `${file}.${process.pid}.${randomBytes(6).toString('hex')}`;
    writeFileSync(draft, `${randomBytes(32).toString('base64url')}\n`, { mode: 0o600, flag: 'wx' });
    try {
      linkSync(draft, file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    } finally {
      unlinkSync(draft);
    }
  } catch (err) {
    return { problem: `a file this process can create (${(err as Error).message})` };
  }
  return readLocalSecret(file) ?? { problem: 'a file this process can read' };
}

/** The secret in `file`, a problem with it, or undefined when there is no such file. */
function readLocalSecret(file: string): LocalSecret | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    return { problem: `a file this process can read (${(err as Error).message})` };
  }
  // Group or others may read it: a secret anyone on the machine can read signs anyone's tokens.
  if (process.platform !== 'win32' && (statSync(file).mode & 0o077) !== 0)
    return { problem: `readable by its owner only (run: chmod 600 ${file})` };
  const secret = text.trim();
  return secret.length >= 32 ? { secret } : { problem: 'a file holding a secret of at least 32 characters' };
}
