import type { Clock } from '../../clock.js';
import { prefixTokens } from './prompt-prefixes.js';

/** How long a prefix stays cached after its last use, as OpenAI keeps them ("5 to 10 minutes of inactivity"). */
export const PROMPT_CACHE_TTL_MS = 5 * 60_000;
/** Prefixes held at most, all scopes together: a few MB, the prefixes of 2.5 million tokens of prompts. */
export const PROMPT_CACHE_MAX_ENTRIES = 20_000;

/**
 * The local model's prompt cache, as OpenAI's works: the longest prefix of a prompt (1,024 tokens
 * and more, in steps of 128) that the same scope sent within the last five minutes is read from
 * the cache. It lives in the process, like OpenAI's caches on each machine: requests that another
 * worker process answers do not find it.
 */
export class PromptCache {
  /** Each prefix's expiry (ms), by scope and digest; in the order of last use, the least recent first. */
  private readonly entries = new Map<string, number>();

  constructor(
    private readonly clock: Clock,
    private readonly maxEntries = PROMPT_CACHE_MAX_ENTRIES,
  ) {}

  /**
   * The tokens of the prompt's longest prefix the scope's cache holds (0 if none); then every prefix
   * of the prompt is held for another five minutes, the least recently used given up beyond the bound.
   */
  use(scope: string, digests: readonly string[]): number {
    const now = this.clock.now().getTime();
    this.dropExpired(now);
    let cached = 0;
    for (let i = digests.length - 1; i >= 0 && cached === 0; i--) {
      const expiry = this.entries.get(`${scope} ${digests[i]}`);
      if (expiry !== undefined && expiry > now) cached = prefixTokens(i);
    }
    for (const digest of digests) {
      const key = `${scope} ${digest}`;
      // Set again, so the Map's order stays the order of last use.
      this.entries.delete(key);
      this.entries.set(key, now + PROMPT_CACHE_TTL_MS);
    }
    for (const key of this.entries.keys()) {
      if (this.entries.size <= this.maxEntries) break;
      this.entries.delete(key);
    }
    return cached;
  }

  /** Prefixes held now. */
  get size(): number {
    return this.entries.size;
  }

  /** The least recently used come first: drop them while they have expired. */
  private dropExpired(now: number): void {
    for (const [key, expiry] of this.entries) {
      if (expiry > now) break;
      this.entries.delete(key);
    }
  }
}
