import { sleep } from '../../clock.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../logger.js';
import type { ProviderName } from '../../providers/providers.js';
import type { ProviderRegistry, ServedModel } from '../../providers/registry.js';
import { ProviderError, type UpstreamEvent, type Provider, type TokenUsage } from '../../providers/types.js';
import type { UsageStatus } from '../../../db/schema/index.js';
import type { CompletionJob } from '../relay/completion-job.js';
import type { RelayPublisher } from '../relay/publisher.js';
import type { AnswerPresenter } from '../stream/presenters/answer-presenter.js';
import { traceUpstream, type UpstreamTrace } from '../relay/completion-tracing.js';
import { newChoice, takeToolCall, type ChoiceState } from '../stream/choices.js';
import { producedUsage } from './billable.js';
import { awaitWebTook } from './delivery.js';
import { unknownProviderError } from './job-errors.js';

export interface UpstreamDeps {
  provider: Provider;
  /** Frames a stream's pieces as they come. */
  present: Pick<AnswerPresenter, 'text' | 'toolCall' | 'finish'>;
  publisher: RelayPublisher;
  signal: AbortSignal;
  log: Logger;
  config: Pick<Config, 'providers' | 'queue'>;
  /** The first attempt's events, when the caller started the upstream request already (see startNow). */
  firstAttempt?: AsyncIterable<UpstreamEvent>;
  /** performance.now() when the caller started that request: the first attempt's start. */
  firstAttemptStartedAt?: number;
  /** Told, for a completed answer, how long the upstream took to its first token and how fast it went after. */
  onUpstreamTiming?: (t: { ttftSeconds: number; tokensPerSecond: number | undefined }) => void;
}

/** How the upstream call ended: what it produced, as the ledger counts it, and each choice as it stands. */
export interface UpstreamRun {
  status: UsageStatus;
  failure: unknown;
  choices: ChoiceState[];
  produced: TokenUsage;
}

/** The upstream a job is answered by, its request perhaps gone out already; or why none can answer it. */
export type Upstream =
  | ({ provider: Provider; model: ServedModel } & Pick<UpstreamDeps, 'firstAttempt' | 'firstAttemptStartedAt'>)
  | { provider?: undefined; refused: unknown };

/**
 * The job's provider, its name read once against this process's plug-ins (an unknown model or
 * parameters it refuses: none). Its request goes out at once, before the job is claimed, so the
 * claim's round trip is not added to the time to first token; not for a job BullMQ has started
 * before: its first run may have answered already, and a request sent only to be aborted may still
 * be billed by the provider.
 */
export function openUpstream(
  deps: { providers: Pick<ProviderRegistry, 'for'>; config: Pick<Config, 'providers'> },
  job: CompletionJob,
  signal: AbortSignal,
  mayBeRerun: boolean,
): Upstream {
  const { plugins } = deps.config.providers;
  const known = (name: string): name is ProviderName => plugins.some((p) => p.name === name);
  let provider: Provider;
  let model: ServedModel;
  try {
    if (!known(job.model.provider)) throw unknownProviderError(job.model);
    model = { id: job.model.id, provider: job.model.provider };
    provider = deps.providers.for(model);
    provider.check(job.params);
  } catch (err) {
    return { refused: err };
  }
  if (mayBeRerun) return { provider, model };
  const firstAttemptStartedAt = performance.now();
  return { provider, model, firstAttempt: startNow(answerEvents(provider, job, signal)), firstAttemptStartedAt };
}

/**
 * Starts an async iterable at once (for a provider's stream: the upstream request goes out) and
 * hands it over as if untouched, so the caller can do other work while the upstream thinks.
 */
export function startNow<T>(source: AsyncIterable<T>): AsyncIterable<T> {
  const it = source[Symbol.asyncIterator]();
  let first: Promise<IteratorResult<T>> | undefined = it.next();
  // Read (and any failure thrown) by whoever iterates; until then it must not count as unhandled.
  first.catch(() => undefined);
  const iterator: AsyncIterator<T> = {
    next: () => {
      const step = first ?? it.next();
      first = undefined;
      return step;
    },
    return: (value?: unknown) => it.return?.(value) ?? Promise.resolve({ done: true, value: undefined }),
  };
  return { [Symbol.asyncIterator]: () => iterator };
}

/**
 * The provider's events for this job: one whole-answer call where the provider offers it and the
 * client does not stream, otherwise the stream.
 */
export function answerEvents(
  provider: Provider,
  job: CompletionJob,
  signal: AbortSignal,
): AsyncIterable<UpstreamEvent> {
  return !job.stream && provider.complete ? provider.complete(job.params, signal) : provider.stream(job.params, signal);
}

/** Exponential backoff with jitter, or the upstream's own Retry-After when it gave one. */
export function retryDelayMs(attempt: number, retryAfterMs: number | undefined): number {
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, 20_000);
  const base = Math.min(250 * 2 ** attempt, 4000);
  return base / 2 + Math.random() * (base / 2);
}

/** The answer as the upstream's events build it: each choice, the upstream's usage, and when the first token came. */
class Answer {
  readonly choices: ChoiceState[];
  upstreamUsage: TokenUsage | undefined;
  responseModel: string | undefined;
  produced = false;
  firstTokenAt: number | undefined;

  constructor(
    private readonly job: CompletionJob,
    private readonly present: UpstreamDeps['present'],
  ) {
    this.choices = Array.from({ length: job.params.n ?? 1 }, newChoice);
  }

  take(ev: UpstreamEvent): void {
    if ((ev.type === 'delta' || ev.type === 'tool_call') && this.firstTokenAt === undefined)
      this.firstTokenAt = performance.now();
    if (ev.type === 'usage') {
      const { type: _usage, model: _model, ...counts } = ev;
      this.upstreamUsage = counts;
      this.responseModel = ev.model;
      return;
    }
    const c = this.choices[ev.index];
    if (!c) return;
    const { stream } = this.job;
    if (ev.type === 'delta') {
      if (ev.content === '') return;
      this.produced = true;
      c.text += ev.content;
      if (stream) this.present.text(ev.index, c, ev.content);
    } else if (ev.type === 'tool_call') {
      this.produced = true;
      const first = !c.started;
      const delta = takeToolCall(c, ev);
      if (stream) this.present.toolCall(ev.index, c, ev, delta, first);
    } else if (ev.type === 'finish') {
      c.finish = ev.reason;
      if (stream) this.present.finish(ev.index, c);
    }
  }
}

/**
 * Calls the provider and feeds its events to the answer, retrying a 429/5xx only while nothing has
 * been produced. Returns why it stopped (undefined: the upstream finished or the job was stopped)
 * and when the attempt that answered started.
 */
async function attempts(
  job: CompletionJob,
  deps: UpstreamDeps,
  answer: Answer,
  upstream: UpstreamTrace | undefined,
  firstStarted: number,
): Promise<{ failure: unknown; attemptStarted: number }> {
  const { provider, signal, log, config } = deps;
  let attemptStarted = firstStarted;
  for (let attempt = 0; ; attempt++) {
    if (attempt > 0 || !deps.firstAttempt) attemptStarted = performance.now();
    try {
      const events = attempt === 0 && deps.firstAttempt ? deps.firstAttempt : answerEvents(provider, job, signal);
      for await (const ev of events) {
        answer.take(ev);
        if (signal.aborted) break;
      }
      return { failure: undefined, attemptStarted };
    } catch (err) {
      if (signal.aborted) return { failure: undefined, attemptStarted };
      const retryable = err instanceof ProviderError && err.retryable;
      if (!answer.produced && retryable && attempt < config.providers.maxRetries) {
        log.warn(
          { requestId: job.id, attempt, err: (err as Error).message },
          'upstream failed before the first token; retrying',
        );
        upstream?.retrying(attempt, err);
        await sleep(retryDelayMs(attempt, err.retryAfterMs), signal);
        if (signal.aborted) return { failure: undefined, attemptStarted };
        continue;
      }
      return { failure: err, attemptStarted };
    }
  }
}

/**
 * The upstream loop: calls the provider (retrying a 429/5xx only while nothing has been produced)
 * and hands a stream's pieces to the presenter as they come. A completed stream then waits for its
 * web process to take it (delivery.ts, awaitWebTook), which may find the process gone and stop it.
 */
export async function upstreamLoop(job: CompletionJob, deps: UpstreamDeps): Promise<UpstreamRun> {
  const { provider, signal } = deps;
  const answer = new Answer(job, deps.present);
  // The first attempt starts when its request went out, which may be before this function ran.
  const firstStarted =
    deps.firstAttempt && deps.firstAttemptStartedAt !== undefined ? deps.firstAttemptStartedAt : performance.now();
  const upstream = traceUpstream(job, provider, firstStarted);
  const { failure, attemptStarted } = await attempts(job, deps, answer, upstream, firstStarted);
  const endedAt = performance.now();
  if (job.stream && job.acks && answer.produced && failure === undefined && !signal.aborted)
    await awaitWebTook(deps.publisher, signal, deps.config.queue.livenessTtlMs);

  const status: UsageStatus = signal.aborted ? 'cancelled' : failure !== undefined ? 'failed' : 'completed';
  const produced = producedUsage(job, status, answer);
  const { firstTokenAt } = answer;
  upstream?.end({
    status,
    failure,
    cancelCause: signal.aborted ? String(signal.reason) : undefined,
    responseModel: answer.responseModel,
    inputTokens: produced.prompt_tokens,
    outputTokens: produced.completion_tokens,
    choices: answer.choices,
    attemptStartedAt: attemptStarted,
    firstTokenAt,
    endedAt,
  });
  if (status === 'completed' && firstTokenAt !== undefined) {
    const afterFirst = (performance.now() - firstTokenAt) / 1000;
    deps.onUpstreamTiming?.({
      ttftSeconds: (firstTokenAt - attemptStarted) / 1000,
      tokensPerSecond: afterFirst > 0 ? produced.completion_tokens / afterFirst : undefined,
    });
  }
  return { status, failure, choices: answer.choices, produced };
}
