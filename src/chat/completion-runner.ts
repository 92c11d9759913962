import type { ChainableCommander } from 'ioredis';
import type { AppContext } from '../context.js';
import { AppError, retryAdvice } from '../errors.js';
import { countTokens } from '../providers/tokenizer.js';
import { ProviderError, type CompletionEvent, type Provider } from '../providers/types.js';
import { appendUsage } from '../usage/usage-stream.js';
import { isMissingScript } from '../limits/limiter.service.js';
import type { UsageStatus } from '../../db/schema/index.js';
import { usageOf, type CompletionJob } from './completion-job.js';
import type { RelayError } from './relay-protocol.js';
import type { RelayPublisher } from './relay-publisher.js';

export interface RunnerDeps {
  app: AppContext;
  provider: Provider;
  publisher: RelayPublisher;
  signal: AbortSignal;
  /** Adds the quota settlement for `actualTokens` to the request's final MULTI. */
  settle: (tx: ChainableCommander, actualTokens: number) => void;
  /** Settles on its own, when the MULTI's settle command failed because Redis lost the script. */
  settleAlone: (actualTokens: number) => Promise<void>;
  /** Failpoint for the crash-recovery test: called after the upstream answered, before recording. */
  beforeRecord?: () => void;
  /** The first attempt's events, when the caller started the upstream request already (see startNow). */
  firstAttempt?: AsyncIterable<CompletionEvent>;
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
export function answerEvents(provider: Provider, job: CompletionJob, signal: AbortSignal): AsyncIterable<CompletionEvent> {
  return !job.stream && provider.complete ? provider.complete(job.params, signal) : provider.stream(job.params, signal);
}

export interface RunOutcome {
  status: UsageStatus;
  promptTokens: number;
  completionTokens: number;
}

interface ChoiceState {
  text: string;
  started: boolean;
  finish: string | null;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
  });

/** Exponential backoff with jitter, or the upstream's own Retry-After when it gave one. */
export function retryDelayMs(attempt: number, retryAfterMs: number | undefined): number {
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, 20_000);
  const base = Math.min(250 * 2 ** attempt, 4000);
  return base / 2 + Math.random() * (base / 2);
}

export function toRelayError(err: unknown): RelayError {
  if (err instanceof AppError) {
    return { status: err.status, error: { message: err.message, type: err.type, code: err.code, param: err.param }, headers: err.headers };
  }
  if (err instanceof ProviderError) {
    // The upstream's own client errors are the caller's (400); its outages are ours to report (502).
    const status = err.status === 400 || err.status === 413 || err.status === 422 ? 400 : err.status === 429 ? 503 : 502;
    const code = err.status === 429 ? 'upstream_rate_limited' : status === 400 ? 'upstream_rejected_request' : 'upstream_error';
    // A rate-limited upstream says when to come back; pass that on (bounded, see retryAdvice).
    const headers: Record<string, string> = status === 503 ? retryAdvice(err.retryAfterMs ?? 5000) : {};
    return { status, error: { message: `The model provider failed: ${err.message}`, type: status === 400 ? 'invalid_request_error' : 'upstream_error', code, param: null }, headers };
  }
  return { status: 500, error: { message: 'The completion failed inside the service; please retry.', type: 'server_error', code: 'internal_error', param: null } };
}

/**
 * The closing MULTI's commands are [usage append, settle]; only the settle can fail on its own
 * (NOSCRIPT after a Redis restart), and then it is run by itself. Anything else is an outage:
 * the usage append is what matters, so it is reported.
 */
export async function settleAfter(errors: (Error | null)[], settleAlone: () => Promise<void>): Promise<void> {
  const [appendErr, settleErr] = errors;
  if (appendErr) throw appendErr;
  if (settleErr) {
    if (!isMissingScript(settleErr)) throw settleErr;
    await settleAlone();
  }
}

/**
 * Runs one completion: calls the provider (retrying a 429/5xx only while nothing has been produced),
 * relays chunks (streaming) or one body (non-streaming), then in a single MULTI publishes the end,
 * appends the usage event and settles the token reservation.
 */
export async function runCompletion(job: CompletionJob, deps: RunnerDeps): Promise<RunOutcome> {
  const { app, provider, publisher, signal } = deps;
  const n = job.params.n ?? 1;
  const choices: ChoiceState[] = Array.from({ length: n }, () => ({ text: '', started: false, finish: null }));
  // OpenAI's schema has system_fingerprint as an optional string, never null: left out when the
  // provider names none.
  const fingerprint = provider.fingerprint === undefined ? {} : { system_fingerprint: provider.fingerprint };
  const fingerprintField = provider.fingerprint === undefined ? '' : `"system_fingerprint":${JSON.stringify(provider.fingerprint)},`;
  // The constant head of every chunk, serialised once per request.
  const head = `{"id":${JSON.stringify(job.id)},"object":"chat.completion.chunk","created":${job.created},"model":${JSON.stringify(job.model.id)},${fingerprintField}"choices":[`;
  const tail = job.includeUsage ? '],"usage":null}\n\n' : ']}\n\n';
  const chunk = (choice: object) => `data: ${head}${JSON.stringify(choice)}${tail}`;

  let upstreamUsage: { prompt_tokens: number; completion_tokens: number } | undefined;
  let produced = false;
  // Tokens are counted only when someone needs the number (the progress record, a cancelled or
  // failed request), and then only the text added since the last count.
  let counted = 0;
  const countedUpTo = choices.map(() => 0);
  const producedTokens = () => {
    choices.forEach((c, i) => {
      if (c.text.length > countedUpTo[i]!) {
        counted += countTokens(c.text.slice(countedUpTo[i]));
        countedUpTo[i] = c.text.length;
      }
    });
    return counted;
  };
  publisher.tokensSoFar = () =>
    upstreamUsage
      ? { promptTokens: upstreamUsage.prompt_tokens, completionTokens: upstreamUsage.completion_tokens }
      : { promptTokens: produced ? job.promptTokens : 0, completionTokens: producedTokens() };

  const onEvent = (ev: CompletionEvent) => {
    if (ev.type === 'usage') {
      upstreamUsage = { prompt_tokens: ev.prompt_tokens, completion_tokens: ev.completion_tokens };
      return;
    }
    const c = choices[ev.index];
    if (!c) return;
    if (ev.type === 'delta') {
      if (ev.content === '') return;
      produced = true;
      c.text += ev.content;
      if (job.stream) {
        const delta = c.started ? { content: ev.content } : { role: 'assistant', content: ev.content };
        c.started = true;
        publisher.sse(chunk({ index: ev.index, delta, logprobs: null, finish_reason: null }), true);
      }
    } else if (ev.type === 'finish') {
      c.finish = ev.reason;
      if (job.stream) {
        const delta = c.started ? {} : { role: 'assistant', content: '' };
        c.started = true;
        publisher.sse(chunk({ index: ev.index, delta, logprobs: null, finish_reason: ev.reason }), false);
      }
    }
  };

  let failure: unknown;
  for (let attempt = 0; ; attempt++) {
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
        app.log.warn({ requestId: job.id, attempt, err: (err as Error).message }, 'upstream failed before the first token; retrying');
        await sleep(retryDelayMs(attempt, (err as ProviderError).retryAfterMs), signal);
        if (signal.aborted) break;
        continue;
      }
      failure = err;
      break;
    }
  }

  const status: UsageStatus = signal.aborted ? 'cancelled' : failure !== undefined ? 'failed' : 'completed';
  // The provider's counts when it finished normally; otherwise what was actually produced. A request
  // the upstream refused before producing anything bills no prompt tokens (providers do not charge them).
  const promptTokens = upstreamUsage?.prompt_tokens ?? (produced ? job.promptTokens : 0);
  const completionTokens = status === 'completed' && upstreamUsage ? upstreamUsage.completion_tokens : producedTokens();
  publisher.tokensSoFar = () => ({ promptTokens, completionTokens });

  // A stream's client has seen text, so a re-run after a crash here can only end the stream and
  // record what this run produced: make the progress record exact first. A non-streaming client
  // has seen nothing, so a re-run simply answers it again and records that (the MULTI below
  // marks the request recorded, so usage is never counted twice): no record to write.
  if (job.stream) await publisher.flush(true);
  deps.beforeRecord?.();

  const record = (tx: ChainableCommander) => {
    appendUsage(tx, app.config, usageOf(job, status, promptTokens, completionTokens));
    deps.settle(tx, promptTokens + completionTokens);
  };

  let errors: (Error | null)[] = [];
  if (status === 'completed') {
    const usage = { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
    if (job.stream) {
      const usageChunk = job.includeUsage ? `data: ${head}],"usage":${JSON.stringify(usage)}}\n\n` : '';
      errors = await publisher.finish('done', usageChunk, record);
    } else {
      const body = {
        id: job.id,
        object: 'chat.completion',
        created: job.created,
        model: job.model.id,
        ...fingerprint,
        // OpenAI's schema requires `refusal` (null when none); a provider's refusal shows as finish_reason content_filter.
        choices: choices.map((c, index) => ({ index, message: { role: 'assistant', content: c.text, refusal: null }, logprobs: null, finish_reason: c.finish ?? 'stop' })),
        usage,
      };
      errors = await publisher.finish('final', JSON.stringify(body), record);
    }
  } else if (status === 'failed') {
    const relayError = toRelayError(failure);
    app.log.warn({ requestId: job.id, status: relayError.status, err: failure instanceof Error ? failure.message : String(failure) }, 'completion failed');
    errors = await publisher.finish('error', JSON.stringify(relayError), record);
  } else {
    // Cancelled: nobody is listening; record what was produced and tell any listener it ended.
    errors = await publisher.finish('done', '', record);
  }
  await settleAfter(errors, () => deps.settleAlone(promptTokens + completionTokens));
  return { status, promptTokens, completionTokens };
}
