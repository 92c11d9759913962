import { sleep } from '../../clock.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../logger.js';
import { AppError, retryAdvice } from '../../errors.js';
import { ProviderError, type UpstreamEvent, type Provider, type TokenUsage } from '../../providers/types.js';
import type { UsageEvent } from '../../usage/usage-event.js';
import type { UsageStatus } from '../../../db/schema/index.js';
import { usageOf, type CompletionJob } from '../relay/completion-job.js';
import { requestCostUsd } from '../../usage/usage-cost.js';
import type { RelayError } from '../relay/protocol.js';
import type { LoggedUsage } from '../relay/log.js';
import type { RelayPublisher } from '../relay/publisher.js';
import { presenterFor } from '../stream/presenters/presenter-for.js';
import type { AnswerUsage } from '../stream/presenters/answer-presenter.js';
import { traceRecord, traceUpstream } from '../relay/completion-tracing.js';
import { newChoice, takeToolCall, tokensOf, type ChoiceState } from '../stream/choices.js';
import { WEB_PROCESS_GONE } from '../relay/liveness.js';

/** The process's pieces a completion uses: its configuration and its log. */
export interface RunnerApp {
  config: Pick<Config, 'redis' | 'providers' | 'queue'>;
  log: Logger;
}

export interface RunnerDeps {
  app: RunnerApp;
  provider: Provider;
  publisher: RelayPublisher;
  signal: AbortSignal;
  /**
   * Appends the request's usage to its usage stream and settles its quota reservation with the
   * tokens it used. Both are safe to repeat (the ledger and the settlement are keyed by request id).
   */
  record: (usage: UsageEvent) => Promise<unknown>;
  /** Writes a usage event straight into the ledger, when Redis stayed unreachable past the outage bound. */
  recordDirectly: (usage: UsageEvent) => Promise<void>;
  /** Failpoint for the crash-recovery test: called after the upstream answered, before recording. */
  beforeRecord?: () => void;
  /** The first attempt's events, when the caller started the upstream request already (see startNow). */
  firstAttempt?: AsyncIterable<UpstreamEvent>;
  /** performance.now() when the caller started that request: the first attempt's start. */
  firstAttemptStartedAt?: number;
  /** Told, for a completed answer, how long the upstream took to its first token and how fast it went after. */
  onUpstreamTiming?: (t: { ttftSeconds: number; tokensPerSecond: number | undefined }) => void;
  /**
   * Keeps a Responses API answer its client asked to store (store: true), before its end is
   * published, so a follow-up's previous_response_id finds it as soon as the client has the end.
   */
  storeResponse?: (job: CompletionJob, response: Record<string, unknown>) => Promise<void>;
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

export interface RunOutcome {
  status: UsageStatus;
  promptTokens: number;
  completionTokens: number;
}

/** Exponential backoff with jitter, or the upstream's own Retry-After when it gave one. */
export function retryDelayMs(attempt: number, retryAfterMs: number | undefined): number {
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, 20_000);
  const base = Math.min(250 * 2 ** attempt, 4000);
  return base / 2 + Math.random() * (base / 2);
}

export function toRelayError(err: unknown): RelayError {
  if (err instanceof AppError) {
    return {
      status: err.status,
      error: { message: err.message, type: err.type, code: err.code, param: err.param },
      headers: err.headers,
    };
  }
  if (err instanceof ProviderError) {
    // The upstream's own client errors are the caller's (400); its outages are ours to report (502).
    const status =
      err.status === 400 || err.status === 413 || err.status === 422 ? 400 : err.status === 429 ? 503 : 502;
    const code =
      err.status === 429 ? 'upstream_rate_limited' : status === 400 ? 'upstream_rejected_request' : 'upstream_error';
    // A rate-limited upstream says when to come back; pass that on (bounded, see retryAdvice).
    const headers: Record<string, string> = status === 503 ? retryAdvice(err.retryAfterMs ?? 5000) : {};
    return {
      status,
      error: {
        message: `The model provider failed: ${err.message}`,
        type: status === 400 ? 'invalid_request_error' : 'upstream_error',
        code,
        param: null,
      },
      headers,
    };
  }
  return {
    status: 500,
    error: {
      message: 'The completion failed inside the service; please retry.',
      type: 'server_error',
      code: 'internal_error',
      param: null,
    },
  };
}

/** What a client still there is told when its request was stopped: a cut answer is not a whole one. */
export const stoppedError = (): AppError =>
  new AppError('unavailable', 'The completion was stopped before it finished; please retry.', {
    code: 'request_cancelled',
  });

/** No tokens: the usage of a request that ran for nobody. */
export const NOTHING: TokenUsage = Object.freeze({ prompt_tokens: 0, completion_tokens: 0 });

/** A usage's prompt and its parts, without its completion. */
export function promptPartOf(u: TokenUsage): Omit<TokenUsage, 'completion_tokens' | 'reasoning_tokens'> {
  const { completion_tokens: _completion, reasoning_tokens: _reasoning, ...prompt } = u;
  return prompt;
}

/**
 * The counts an answer's usage reports, in chat's names or the Responses API's (its relay log or
 * its stored body). The wire does not say which cache writes had the 1-hour TTL: `oneHour` does.
 */
export function countsOfAnswerUsage(
  usage: Partial<AnswerUsage> & {
    input_tokens?: number;
    output_tokens?: number;
    input_tokens_details?: { cached_tokens?: number; cache_write_tokens?: number };
    output_tokens_details?: { reasoning_tokens?: number };
  },
  oneHour = 0,
): TokenUsage {
  const prompt = usage.prompt_tokens_details ?? usage.input_tokens_details;
  return {
    prompt_tokens: usage.prompt_tokens ?? usage.input_tokens ?? 0,
    completion_tokens: usage.completion_tokens ?? usage.output_tokens ?? 0,
    cached_tokens: prompt?.cached_tokens ?? 0,
    cache_write_tokens: prompt?.cache_write_tokens ?? 0,
    cache_write_1h_tokens: oneHour,
    reasoning_tokens: (usage.completion_tokens_details ?? usage.output_tokens_details)?.reasoning_tokens ?? 0,
  };
}

/** Completion tokens of a partial answer: each choice's whole text and tool calls counted, as its reader would. */
export function countChoices(choices: readonly Pick<ChoiceState, 'text' | 'calls'>[]): number {
  let total = 0;
  for (const c of choices) total += tokensOf(c);
  return total;
}

/**
 * The usage record and quota settlement, then the last message (see RelayPublisher.finish). When
 * Redis stays out of reach longer than config.queue.redisOutageMaxMs the usage goes straight into
 * the ledger instead (idempotent by request id), so it is never lost.
 */
export async function finishRecording(
  deps: Pick<RunnerDeps, 'app' | 'publisher' | 'record' | 'recordDirectly'>,
  job: CompletionJob,
  kind: 'done' | 'final' | 'error',
  payload: string,
  usage: UsageEvent,
): Promise<void> {
  const { app, publisher } = deps;
  await traceRecord(job, usage.status, async () => {
    try {
      await publisher.finish(
        kind,
        payload,
        () => deps.record(usage),
        performance.now() + app.config.queue.redisOutageMaxMs,
      );
    } catch (err) {
      app.log.warn(
        { requestId: job.id, reason: err instanceof Error ? err.message : String(err) },
        'Redis stayed unreachable; recording the usage straight into the ledger',
      );
      await deps.recordDirectly(usage);
    }
  });
}

/** How long a stopped job waits for the replies of relay calls still out before it counts what was received. */
const RECEIPT_WAIT_MS = 1000;

/**
 * The last message a job stopped for its web process's death bills through. A web process that
 * acknowledges what it hands its clients (relay/acks.ts) has handed each client at most the message
 * after its acknowledgement, and that one only if it reached the process: billed through it, a
 * client is billed at most one relay message beyond what it received, and never less, however
 * many messages the process held unwritten when it died. A process that acknowledged nothing
 * handed its client no part of the answer. For a job of a web process that does not acknowledge,
 * what its subscription took.
 */
export function billedThrough(acks: boolean, acked: number | undefined, received: number): number {
  if (!acks) return received;
  if (acked === undefined) return 0;
  return Math.min(acked + 1, Math.max(received, acked));
}

/**
 * What a job whose web process died is billed: each choice's text and tool calls up to the
 * message billedThrough names. A request none of whose answer reached its client bills nothing,
 * like one whose client left before it began.
 */
async function billedOnReceipt(
  deps: Pick<RunnerDeps, 'publisher'>,
  job: CompletionJob,
  counts: TokenUsage,
): Promise<TokenUsage | undefined> {
  const { publisher } = deps;
  await publisher.settled(RECEIPT_WAIT_MS);
  try {
    const acks = job.acks === true;
    const through = billedThrough(acks, acks ? await publisher.webAcked() : undefined, publisher.received);
    if (through === 0) return { prompt_tokens: 0, completion_tokens: 0 };
    return {
      ...promptPartOf(counts),
      completion_tokens: countChoices(await publisher.choicesThrough(through, job.params.n ?? 1)),
    };
  } catch {
    // The log could not be read (Redis away): what was produced is billed, rather than nothing.
    return undefined;
  }
}

/**
 * A stream whose answer is complete waits, before its record, until its web process has
 * acknowledged all of it but the last message, or is found gone (its job is then stopped and billed
 * like any other, billedOnReceipt). Otherwise a process that died holding the end of the answer
 * unwritten would have it billed in full. The client does not wait for this: the messages past
 * the acknowledgement are the ones its web process hands on with its next acknowledgement.
 * Bounded, for a process that neither acknowledges nor is found gone.
 */
async function awaitWebTook(deps: Pick<RunnerDeps, 'app' | 'publisher' | 'signal'>): Promise<void> {
  const { publisher } = deps;
  await publisher.flushNow();
  await publisher.settled(RECEIPT_WAIT_MS);
  await publisher.webTook(publisher.lastSeq - 1, deps.signal, 4 * deps.app.config.queue.livenessTtlMs);
}

/**
 * A whole answer goes to its web process before its record, which waits until the process has
 * acknowledged it (it hands the answer to its client only then: relay/acks.ts) or is found gone.
 * A process that died without acknowledging it handed its client nothing, and nothing is billed,
 * as for a request whose client left before it began; recorded first, such an answer was billed
 * in full. Should this worker die in between, the take-over records it from the relay log
 * (run-job.ts). Returns what was recorded.
 */
async function answerBeforeRecord(
  deps: Pick<RunnerDeps, 'app' | 'publisher' | 'signal' | 'record' | 'recordDirectly'>,
  job: CompletionJob,
  body: string,
  usage: UsageEvent,
): Promise<UsageEvent> {
  const { publisher, signal } = deps;
  const seq = await publisher.sendEnd('final', body);
  await publisher.settled(RECEIPT_WAIT_MS);
  await publisher.webTook(seq, signal, 4 * deps.app.config.queue.livenessTtlMs);
  // Read again once the process is found gone: it may have taken the answer just before.
  const taken =
    !(signal.aborted && signal.reason === WEB_PROCESS_GONE) ||
    ((await publisher.webAcked().catch(() => seq)) ?? -1) >= seq;
  const recorded = taken ? usage : usageOf(job, 'cancelled', NOTHING);
  await finishRecording(deps, job, 'final', body, recorded);
  return recorded;
}

/**
 * Stores a Responses API answer whose client asked for it (store: true). A failure to store is
 * logged and the answer still ends: the client has its answer; only a later retrieve or
 * previous_response_id of it would find nothing.
 */
export async function storeAnswer(
  deps: Pick<RunnerDeps, 'app' | 'storeResponse'>,
  job: CompletionJob,
  response: Record<string, unknown> | undefined,
): Promise<void> {
  if (!response || !job.wire?.store || !deps.storeResponse) return;
  try {
    await deps.storeResponse(job, response);
  } catch (err) {
    deps.app.log.error({ requestId: job.id, err }, 'could not store the response; it ends unstored');
  }
}

/** The usage a presenter frames: the ledger's figures, and their cost in USD. */
export function answerUsage(usage: UsageEvent): AnswerUsage {
  return {
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
    prompt_tokens_details: {
      cached_tokens: usage.cached_tokens ?? 0,
      cache_write_tokens: usage.cache_write_tokens ?? 0,
    },
    completion_tokens_details: { reasoning_tokens: usage.reasoning_tokens ?? 0 },
    cost: Number(requestCostUsd(usage)),
  };
}

/**
 * Runs one completion: calls the provider (retrying a 429/5xx only while nothing has been produced),
 * relays chunks (streaming) or one body (non-streaming), then records the usage, settles the token
 * reservation and publishes the end (finishRecording).
 */
export async function runCompletion(job: CompletionJob, deps: RunnerDeps): Promise<RunOutcome> {
  const { app, provider, publisher, signal } = deps;
  const n = job.params.n ?? 1;
  const choices: ChoiceState[] = Array.from({ length: n }, newChoice);
  const present = presenterFor(job, provider, publisher);

  let upstreamUsage: TokenUsage | undefined;
  let responseModel: string | undefined;
  let produced = false;

  // The first attempt starts when its request went out, which may be before this function ran.
  let attemptStarted =
    deps.firstAttempt && deps.firstAttemptStartedAt !== undefined ? deps.firstAttemptStartedAt : performance.now();
  let firstTokenAt: number | undefined;
  const upstream = traceUpstream(job, provider, attemptStarted);
  const onEvent = (ev: UpstreamEvent) => {
    if ((ev.type === 'delta' || ev.type === 'tool_call') && firstTokenAt === undefined)
      firstTokenAt = performance.now();
    if (ev.type === 'usage') {
      const { type: _usage, model: _model, ...counts } = ev;
      upstreamUsage = counts;
      responseModel = ev.model;
      return;
    }
    const c = choices[ev.index];
    if (!c) return;
    if (ev.type === 'delta') {
      if (ev.content === '') return;
      produced = true;
      c.text += ev.content;
      if (job.stream) present.text(ev.index, c, ev.content);
    } else if (ev.type === 'tool_call') {
      produced = true;
      const first = !c.started;
      const delta = takeToolCall(c, ev);
      if (job.stream) present.toolCall(ev.index, c, ev, delta, first);
    } else if (ev.type === 'finish') {
      c.finish = ev.reason;
      if (job.stream) present.finish(ev.index, c);
    }
  };

  let failure: unknown;
  for (let attempt = 0; ; attempt++) {
    if (attempt > 0 || !deps.firstAttempt) attemptStarted = performance.now();
    try {
      const events = attempt === 0 && deps.firstAttempt ? deps.firstAttempt : answerEvents(provider, job, signal);
      for await (const ev of events) {
        onEvent(ev);
        if (signal.aborted) break;
      }
      break;
    } catch (err) {
      if (signal.aborted) break;
      const retryable = err instanceof ProviderError && err.retryable;
      if (!produced && retryable && attempt < app.config.providers.maxRetries) {
        app.log.warn(
          { requestId: job.id, attempt, err: (err as Error).message },
          'upstream failed before the first token; retrying',
        );
        upstream?.retrying(attempt, err);
        await sleep(retryDelayMs(attempt, err.retryAfterMs), signal);
        if (signal.aborted) break;
        continue;
      }
      failure = err;
      break;
    }
  }
  const upstreamEndedAt = performance.now();
  if (job.stream && job.acks && produced && failure === undefined && !signal.aborted) await awaitWebTook(deps);

  let status: UsageStatus = signal.aborted ? 'cancelled' : failure !== undefined ? 'failed' : 'completed';
  // The provider's counts when it finished normally; otherwise what was actually produced, counted
  // over each choice's whole text, as the client counts what it received. A request the upstream
  // refused before producing anything bills no prompt tokens (providers do not charge them).
  // A cut answer's reasoning is not known (the provider counts it at the end): only its text is.
  let counts: TokenUsage =
    status === 'completed' && upstreamUsage
      ? upstreamUsage
      : {
          ...(upstreamUsage ? promptPartOf(upstreamUsage) : { prompt_tokens: produced ? job.promptTokens : 0 }),
          completion_tokens: countChoices(choices),
        };
  if (signal.aborted && signal.reason === WEB_PROCESS_GONE) {
    // Its web process died: only what a subscriber took reached anyone (see billedOnReceipt).
    counts = (await billedOnReceipt(deps, job, counts)) ?? counts;
  }
  let promptTokens = counts.prompt_tokens;
  let completionTokens = counts.completion_tokens;
  upstream?.end({
    status,
    failure,
    cancelCause: signal.aborted ? String(signal.reason) : undefined,
    responseModel,
    inputTokens: promptTokens,
    outputTokens: completionTokens,
    choices,
    attemptStartedAt: attemptStarted,
    firstTokenAt,
    endedAt: upstreamEndedAt,
  });

  // A stream's client has seen text: should this worker die before recording, a re-run ends the
  // stream and bills it from the relay log, and with the upstream's usage logged beside the text
  // it bills exactly that. A non-streaming client has seen nothing, so a re-run answers it again.
  const usageEvent = usageOf(job, status, counts);
  // `cost` follows OpenRouter's usage.cost: USD, exact as the ledger has it (a JSON number keeps
  // its at most 12 decimals to well under a cent for any single request).
  const usage = answerUsage(usageEvent);
  const donePayload = job.stream && status === 'completed' ? present.done(choices, usage) : '';
  if (job.stream && status === 'completed') {
    publisher.note(
      'usage',
      JSON.stringify({
        usage,
        done: donePayload,
        ...(usageEvent.cache_write_1h_tokens ? { cache_write_1h_tokens: usageEvent.cache_write_1h_tokens } : {}),
      } satisfies LoggedUsage),
    );
    await publisher.flushNow();
  }
  deps.beforeRecord?.();

  if (status === 'completed' && firstTokenAt !== undefined) {
    const afterFirst = (performance.now() - firstTokenAt) / 1000;
    deps.onUpstreamTiming?.({
      ttftSeconds: (firstTokenAt - attemptStarted) / 1000,
      tokensPerSecond: afterFirst > 0 ? completionTokens / afterFirst : undefined,
    });
  }

  // What ends the request, framed once: the stored answer (Responses, store: true) is kept before
  // the end is published, so a client holding the end finds it.
  let ending: { kind: 'done' | 'final' | 'error'; payload: string };
  if (status === 'completed') {
    ending = job.stream
      ? { kind: 'done', payload: donePayload }
      : { kind: 'final', payload: present.body(choices, usage) };
  } else if (status === 'failed') {
    const relayError = toRelayError(failure);
    app.log.warn(
      {
        requestId: job.id,
        status: relayError.status,
        err: failure instanceof Error ? failure.message : String(failure),
      },
      'completion failed',
    );
    ending = { kind: 'error', payload: present.error(relayError, choices, usage) };
  } else {
    // Cancelled: record what was produced. Normally nobody is listening; should a client still be
    // there (its web process was only thought gone), it must not take the cut answer for a whole one.
    ending = { kind: 'error', payload: present.error(toRelayError(stoppedError()), choices, usage) };
  }
  await storeAnswer(deps, job, present.finalObject());

  if (ending.kind === 'final' && job.acks) {
    const recorded = await answerBeforeRecord(deps, job, ending.payload, usageEvent);
    ({ status, prompt_tokens: promptTokens, completion_tokens: completionTokens } = recorded);
  } else {
    await finishRecording(deps, job, ending.kind, ending.payload, usageEvent);
  }
  return { status, promptTokens, completionTokens };
}
