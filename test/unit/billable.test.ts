import { expect } from 'chai';
import { billable, billedThrough, countChoices, producedUsage } from '../../src/chat/job/billable.js';
import type { CompletionJob } from '../../src/chat/relay/completion-job.js';
import { newChoice } from '../../src/chat/stream/choices.js';

// The one billing rule of a completion job's end: what was produced, given what was delivered.

const job = {
  id: 'chatcmpl-test',
  accountId: 'acct',
  tier: 'paid',
  created: 1_764_000_000,
  stream: true,
  promptTokens: 40,
  params: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
  model: {
    id: 'gpt-4o-mini',
    provider: 'openai',
    upstream_model: 'gpt-4o-mini',
    input_price_per_million: '0.15',
    output_price_per_million: '0.60',
  },
} as unknown as CompletionJob;

const produced = { prompt_tokens: 50, completion_tokens: 30, cached_tokens: 10 };
const choice = (text: string) => ({ ...newChoice(), text });

describe('what a completion job is billed', () => {
  it('bills all that was produced when nothing says less reached the client', () => {
    const usage = billable(job, 'completed', produced, 'all');
    expect(usage).to.include({ status: 'completed', prompt_tokens: 50, completion_tokens: 30, cached_tokens: 10 });
  });

  it('bills nothing for a whole answer that did not reach its client, and counts it cancelled', () => {
    expect(billable(job, 'completed', produced, 'none')).to.include({
      status: 'cancelled',
      prompt_tokens: 0,
      completion_tokens: 0,
    });
  });

  it('keeps a failed status when nothing of the answer was delivered', () => {
    expect(billable(job, 'failed', produced, 'none')).to.include({ status: 'failed', prompt_tokens: 0 });
  });

  it('bills the prompt and the choices the relay log shows were sent for a cut answer', () => {
    const choices = [choice('Hello there')];
    const usage = billable(job, 'cancelled', produced, { choices });
    expect(usage).to.include({
      status: 'cancelled',
      prompt_tokens: 50,
      cached_tokens: 10,
      completion_tokens: countChoices(choices),
    });
    expect(countChoices(choices)).to.be.above(0).and.below(30);
  });

  it('counts what a cut answer produced from its text, with the admitted prompt once it produced any', () => {
    const counts = producedUsage(job, 'cancelled', {
      upstreamUsage: undefined,
      produced: true,
      choices: [choice('Hi')],
    });
    expect(counts).to.deep.equal({ prompt_tokens: 40, completion_tokens: countChoices([choice('Hi')]) });
    const refused = producedUsage(job, 'failed', { upstreamUsage: undefined, produced: false, choices: [choice('')] });
    expect(refused).to.deep.equal({ prompt_tokens: 0, completion_tokens: 0 });
  });

  it('takes the provider’s counts for an answer that completed', () => {
    const counts = producedUsage(job, 'completed', { upstreamUsage: produced, produced: true, choices: [] });
    expect(counts).to.equal(produced);
  });

  it('bills a dead web process’s client through the message after its acknowledgement, if that one reached it', () => {
    expect(billedThrough(true, 4, 9)).to.equal(5);
    expect(billedThrough(true, 4, 4)).to.equal(4);
    expect(billedThrough(true, undefined, 9)).to.equal(0);
    expect(billedThrough(false, undefined, 7)).to.equal(7);
  });
});
