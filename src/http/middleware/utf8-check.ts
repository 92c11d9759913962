import { isUtf8 } from 'node:buffer';

/**
 * Checks that a body arriving in chunks is valid UTF-8, without holding or decoding it: a
 * multi-byte character cut at a chunk boundary is carried to the next chunk. The JSON parser
 * would otherwise turn invalid bytes into U+FFFD and silently change what the client sent.
 */
export class Utf8Check {
  private carry: Buffer = Buffer.alloc(0);
  private valid = true;

  feed(chunk: Buffer): void {
    if (!this.valid) return;
    const buf = this.carry.length > 0 ? Buffer.concat([this.carry, chunk]) : chunk;
    const cut = incompleteTail(buf);
    if (!isUtf8(buf.subarray(0, cut))) this.valid = false;
    this.carry = Buffer.from(buf.subarray(cut));
  }

  /** True when everything fed was valid UTF-8 and no character was left unfinished. */
  get ok(): boolean {
    return this.valid && this.carry.length === 0;
  }
}

/** Where a multi-byte sequence that the buffer ends in the middle of starts (the length if none). */
function incompleteTail(buf: Buffer): number {
  for (let i = buf.length - 1; i >= Math.max(0, buf.length - 3); i--) {
    const b = buf[i]!;
    if ((b & 0xc0) === 0x80) continue;
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return buf.length - i < need ? i : buf.length;
  }
  return buf.length;
}

/**
 * The first query parameter whose name or value is not valid UTF-8 once percent-decoded, or
 * undefined. Node's query parser would replace such bytes with U+FFFD, as the body parser does.
 */
export function badlyEncodedQueryParam(querystring: string): string | undefined {
  if (querystring === '') return undefined;
  for (const part of querystring.split('&')) {
    const [rawKey = '', rawValue = ''] = part.split('=', 2);
    const strict = (s: string) => decodeURIComponent(s.replace(/\+/g, ' '));
    try {
      strict(rawKey);
      strict(rawValue);
    } catch {
      try {
        return strict(rawKey);
      } catch {
        return rawKey;
      }
    }
  }
  return undefined;
}
