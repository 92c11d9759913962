import type { CacheControl, CompletionParams } from './types.js';

/** A cache_control mark and where the request has it (the path under the body, as a 422's loc names it). */
export interface CacheBreakpoint {
  mark: CacheControl;
  at: (string | number)[];
}

/**
 * Every cache_control breakpoint of a request with its place, in the order the request has them:
 * the tools, then the messages (each message's parts, then the message's own mark).
 */
export function cacheBreakpointsAt(params: Pick<CompletionParams, 'tools' | 'messages'>): CacheBreakpoint[] {
  const found: CacheBreakpoint[] = [];
  params.tools?.forEach((tool, i) => {
    if (tool.cache_control) found.push({ mark: tool.cache_control, at: ['tools', i, 'cache_control'] });
  });
  params.messages.forEach((m, i) => {
    if (Array.isArray(m.content))
      m.content.forEach((part, j) => {
        if (part.cache_control)
          found.push({ mark: part.cache_control, at: ['messages', i, 'content', j, 'cache_control'] });
      });
    if (m.cache_control) found.push({ mark: m.cache_control, at: ['messages', i, 'cache_control'] });
  });
  return found;
}

/** Every cache_control breakpoint of a request, in the order cacheBreakpointsAt finds them. */
export function cacheBreakpoints(params: Pick<CompletionParams, 'tools' | 'messages'>): CacheControl[] {
  return cacheBreakpointsAt(params).map((b) => b.mark);
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
