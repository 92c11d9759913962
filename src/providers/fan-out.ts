// n on every model: where one upstream call answers fewer choices than the request's n (Anthropic's
// Messages API has no n), the request is made as several calls whose events are merged into one
// answer, so the worker sees one stream: each call's choices renumbered into their place, deltas
// interleaved as they come, the usage summed and sent once at the end (one ledger row).
import type { UpstreamEvent, CompletionParams, Provider, TokenUsage } from './types.js';

type Call = (params: CompletionParams, signal: AbortSignal) => AsyncIterable<UpstreamEvent>;

/** The provider as it answers any n: itself where it can, n calls merged where it cannot. */
export function withFanOut(inner: Provider): Provider {
  const max = inner.maxChoices;
  if (max === undefined) return inner;
  const complete = inner.complete?.bind(inner);
  return {
    name: inner.name,
    fingerprint: inner.fingerprint,
    wraps: inner,
    maxChoices: max,
    check: (p) => inner.check(p),
    stream: (p, signal) => fanOut(p, signal, max, (q, s) => inner.stream(q, s)),
    ...(complete ? { complete: (p: CompletionParams, signal: AbortSignal) => fanOut(p, signal, max, complete) } : {}),
  };
}

/** The events of `p` made as calls of at most `max` choices each, merged (see withFanOut). */
export async function* fanOut(
  p: CompletionParams,
  signal: AbortSignal,
  max: number,
  call: Call,
): AsyncGenerator<UpstreamEvent> {
  const n = p.n ?? 1;
  if (n <= max) {
    yield* call(p, signal);
    return;
  }
  // One abort for every call: a failed call stops the others, and so does the caller's abort.
  const all = new AbortController();
  const onAbort = () => all.abort(signal.reason);
  signal.addEventListener('abort', onAbort, { once: true });
  const calls: { offset: number; it: AsyncIterator<UpstreamEvent> }[] = [];
  for (let offset = 0; offset < n; offset += max) {
    const size = Math.min(max, n - offset);
    calls.push({ offset, it: call({ ...p, n: size }, all.signal)[Symbol.asyncIterator]() });
  }
  const usage: Required<TokenUsage> = {
    prompt_tokens: 0,
    completion_tokens: 0,
    cached_tokens: 0,
    cache_write_tokens: 0,
    cache_write_1h_tokens: 0,
    reasoning_tokens: 0,
  };
  let reported = 0;
  let model: string | undefined;
  const pending = new Map(calls.map((c, i) => [i, c.it.next().then((r) => ({ i, r }))]));
  try {
    while (pending.size > 0) {
      const { i, r } = await Promise.race(pending.values());
      if (r.done) {
        pending.delete(i);
        continue;
      }
      const { offset, it } = calls[i]!;
      pending.set(
        i,
        it.next().then((next) => ({ i, r: next })),
      );
      const ev = r.value;
      if (ev.type === 'usage') {
        for (const k of Object.keys(usage) as (keyof TokenUsage)[]) usage[k] += ev[k] ?? 0;
        reported += 1;
        model ??= ev.model;
      } else {
        yield { ...ev, index: ev.index + offset };
      }
    }
    // Summed only when every call counted its own; otherwise the worker counts what was produced.
    if (reported === calls.length) {
      const parts = Object.entries(usage).filter(
        ([k, v]) => v > 0 || k === 'prompt_tokens' || k === 'completion_tokens',
      );
      yield { type: 'usage', ...(Object.fromEntries(parts) as unknown as TokenUsage), model };
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
    if (pending.size > 0) {
      all.abort();
      await Promise.allSettled([...pending.values()]);
      await Promise.allSettled(calls.map(async (c) => c.it.return?.()));
    }
  }
}
