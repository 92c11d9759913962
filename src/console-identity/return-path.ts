/** Where a signed-in browser lands when nothing else is asked for. */
export const DEFAULT_RETURN_PATH = '/console/';

const MAX_LENGTH = 512;

/**
 * A return path is a path on this service, nothing else: it starts with one `/` followed by
 * neither `/` nor `\` (which browsers read as another host), holds no backslash, control
 * character or whitespace, and says the same once percent-decoded (so `/%2F%2Fevil` is refused
 * too). Anything else is refused, so a sign-in link can never send a browser to another site.
 */
export function isSafeReturnPath(value: string): boolean {
  if (value.length === 0 || value.length > MAX_LENGTH) return false;
  const plain = (s: string) => /^\/(?![/\\])/.test(s) && !/[\\\s]/.test(s) && ![...s].some(isControl);
  if (!plain(value)) return false;
  let decoded: string;
  try {
    decoded = decodeURIComponent(value);
  } catch {
    return false;
  }
  if (!plain(decoded)) return false;
  // The URL parser has the last word: resolved against any origin, it stays on that origin.
  const base = 'http://service.invalid';
  return new URL(value, base).origin === base && new URL(decoded, base).origin === base;
}

const isControl = (c: string): boolean => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f;

/** The path to send the browser to: `value` when it is a safe return path, else the default. */
export const returnPathOr = (value: string | undefined): string =>
  value !== undefined && isSafeReturnPath(value) ? value : DEFAULT_RETURN_PATH;
