import { expect } from 'chai';
import { isAbortError } from '../abort.js';
import type { CompletionParams, Provider } from '../types.js';
import { collectEvents, type FakeUpstream } from './upstream-fake.js';

/** Every adapter's cancellation contract: aborting mid-stream throws an abort error and closes the upstream connection. */
export async function expectAbortClosesTheUpstream(
  provider: Provider,
  fake: FakeUpstream,
  params: CompletionParams,
): Promise<void> {
  fake.script({ tokens: Array.from({ length: 100 }, () => ' tok'), tokenDelayMs: 50 });
  const ac = new AbortController();
  const it = provider.stream(params, ac.signal)[Symbol.asyncIterator]();
  expect((await it.next()).value).to.include({ type: 'delta' });
  ac.abort();
  const err = await it.next().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isAbortError(err)).to.equal(true);
  await fake.lastRequest!.closed;
  expect(fake.lastRequest!.closedEarly).to.equal(true);
}

/**
 * Every adapter's usage contract: what its provider says was read from the prompt cache and spent
 * thinking comes out in OpenAI's meaning, as parts of prompt_tokens and completion_tokens, from a
 * stream and from a whole answer alike.
 */
export async function expectCachedAndReasoningTokens(
  provider: Provider,
  fake: FakeUpstream,
  params: CompletionParams,
  how: 'stream' | 'complete',
): Promise<void> {
  fake.script({ tokens: ['Hi', '!'], usage: { prompt: 2_000, cached: 1_536, completion: 2, thoughts: 64 } });
  const r = await collectEvents(provider[how]!(params, new AbortController().signal));
  expect(r.error).to.equal(undefined);
  expect(r.texts).to.deep.equal(['Hi!']);
  expect(r.usage).to.deep.equal({
    prompt_tokens: 2_000,
    completion_tokens: 66,
    cached_tokens: 1_536,
    reasoning_tokens: 64,
  });
}
