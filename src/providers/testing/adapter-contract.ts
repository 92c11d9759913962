import { expect } from 'chai';
import { isAbortError } from '../abort.js';
import type { CompletionParams, Provider } from '../types.js';
import type { FakeUpstream } from './upstream-fake.js';

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
