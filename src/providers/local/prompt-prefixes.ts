// The prefixes of a prompt the local model's prompt cache keys by (prompt-cache.ts), as OpenAI
// caches them: the first 1,024 tokens, then every 128 more. Pure, so large prompts are digested on
// a compute thread (compute-tasks.ts).
import { createHash, type Hash } from 'node:crypto';
import { encodeTokens, promptPieces } from '../tokenizer.js';
import type { ChatMessage, CompletionParams } from '../types.js';

/** The shortest prefix cached, in tokens. */
export const CACHE_MIN_TOKENS = 1024;
/** Cached prefixes grow in steps of this many tokens. */
export const CACHE_STEP_TOKENS = 128;

/** What the cache reads of a prompt. */
export interface PromptPrefixes {
  /** The prompt's tokens, as countPromptTokens counts them. */
  tokens: number;
  /**
   * The digest of each cacheable prefix, shortest first: the i-th covers the first
   * CACHE_MIN_TOKENS + i × CACHE_STEP_TOKENS tokens. None for a prompt under CACHE_MIN_TOKENS.
   */
  digests: string[];
}

/** The tokens of the prefix whose digest is digests[i]. */
export const prefixTokens = (i: number): number => CACHE_MIN_TOKENS + i * CACHE_STEP_TOKENS;

/**
 * The prompt's token count and its prefixes' digests, in one pass over its token ids: the
 * tokenizer's for text; for a part that is no text (framing, an image), its key, then as many
 * placeholder ids as it counts tokens.
 */
export function promptPrefixes(
  messages: readonly ChatMessage[],
  extras: Pick<CompletionParams, 'tools' | 'response_format'>,
): PromptPrefixes {
  const hasher = new PrefixHasher();
  for (const piece of promptPieces(messages, extras)) {
    if (typeof piece === 'string') hasher.text(encodeTokens(piece));
    else hasher.opaque(piece.key, piece.tokens);
  }
  return { tokens: hasher.tokens, digests: hasher.digests };
}

// Words no vocabulary id (under 2^31) equals: a key's record starts with KEY, its tokens are PLACEHOLDERs.
const KEY = 0xffff_ffff;
const PLACEHOLDER = 0xffff_fffe;

/**
 * A running digest of a prompt's tokens, copied at every step boundary from CACHE_MIN_TOKENS on.
 * What it reads is 32-bit words, ids and records of keys ([KEY, byte length, UTF-8 bytes]), so
 * different prompts never read the same.
 */
class PrefixHasher {
  tokens = 0;
  readonly digests: string[] = [];
  private readonly hash: Hash = createHash('sha256');
  /** Ids not yet hashed: never more than a step's. */
  private readonly pending = new Uint32Array(CACHE_STEP_TOKENS);
  private filled = 0;

  text(ids: readonly number[]): void {
    for (const id of ids) this.push(id);
  }

  opaque(key: string, tokens: number): void {
    this.flush();
    this.hash.update(new Uint32Array([KEY, Buffer.byteLength(key)]));
    this.hash.update(key);
    for (let i = 0; i < tokens; i++) this.push(PLACEHOLDER);
  }

  private push(id: number): void {
    this.pending[this.filled++] = id;
    this.tokens++;
    if (this.tokens % CACHE_STEP_TOKENS !== 0) return;
    this.flush();
    // 128 bits: a collision within one account's few thousand prefixes is out of reach.
    if (this.tokens >= CACHE_MIN_TOKENS) this.digests.push(this.hash.copy().digest().toString('base64url', 0, 16));
  }

  private flush(): void {
    if (this.filled > 0) this.hash.update(this.pending.subarray(0, this.filled));
    this.filled = 0;
  }
}
