import type { CacheControl, CompletionParams } from './types.js';

/**
 * Every cache_control breakpoint of a request, in the order the provider reads the prompt: the
 * tools, then the messages (each message's parts, then the message's own mark).
 */
export function cacheBreakpoints(params: Pick<CompletionParams, 'tools' | 'messages'>): CacheControl[] {
  const marks: CacheControl[] = [];
  for (const tool of params.tools ?? []) if (tool.cache_control) marks.push(tool.cache_control);
  for (const m of params.messages) {
    if (Array.isArray(m.content)) for (const part of m.content) if (part.cache_control) marks.push(part.cache_control);
    if (m.cache_control) marks.push(m.cache_control);
  }
  return marks;
}

/**
 * The longest TTL a request may write its prompt to a cache with ('1h' over '5m'), or undefined
 * when it marks nothing: a provider that caches only what is marked writes nothing then.
 */
export function longestCacheTtl(params: Pick<CompletionParams, 'tools' | 'messages'>): '5m' | '1h' | undefined {
  let ttl: '5m' | '1h' | undefined;
  for (const mark of cacheBreakpoints(params)) {
    if (mark.ttl === '1h') return '1h';
    ttl = '5m';
  }
  return ttl;
}
