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
 * The prompt's token count and its prefixes' digests, in one pass over its token ids. The text's ids
 * are the tokenizer's; a part that is no text (framing, an image) reads as ids beyond the
 * vocabulary's, drawn from its key.
 */
export function promptPrefixes(
  messages: readonly ChatMessage[],
  extras: Pick<CompletionParams, 'tools' | 'response_format'>,
): PromptPrefixes {
  const hasher = new PrefixHasher();
  for (const piece of promptPieces(messages, extras)) {
    if (typeof piece === 'string') {
      for (const id of encodeTokens(piece)) hasher.push(id);
    } else {
      const id = opaqueId(piece.key);
      for (let i = 0; i < piece.tokens; i++) hasher.push(id);
    }
  }
  return { tokens: hasher.tokens, digests: hasher.digests };
}

/** An id of the upper half of 32 bits, which no vocabulary id (under 2^31) equals. */
function opaqueId(key: string): number {
  return (createHash('sha256').update(key).digest().readUInt32LE(0) | 0x8000_0000) >>> 0;
}

/**
 * A running digest of token ids, copied at every step boundary from CACHE_MIN_TOKENS on. The ids go
 * into the hash a block of CACHE_STEP_TOKENS at a time.
 */
class PrefixHasher {
  tokens = 0;
  readonly digests: string[] = [];
  private readonly hash: Hash = createHash('sha256');
  private readonly block = new Uint32Array(CACHE_STEP_TOKENS);

  push(id: number): void {
    this.block[this.tokens % CACHE_STEP_TOKENS] = id;
    this.tokens++;
    if (this.tokens % CACHE_STEP_TOKENS !== 0) return;
    this.hash.update(this.block);
    // 128 bits: a collision within one account's few thousand prefixes is out of reach.
    if (this.tokens >= CACHE_MIN_TOKENS) this.digests.push(this.hash.copy().digest().toString('base64url', 0, 16));
  }
}
