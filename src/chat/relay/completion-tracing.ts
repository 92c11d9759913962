// The spans of one completion under the web's server span: admission, the wait in the queue and
// the relay on the web process; the job, the upstream call and the record on the worker, joined to
// the same trace through the job's data. They name the account and the request (the completion id,
// the usage ledger's request_id), never prompt or answer text. With tracing off every function here
// returns at its first line, and nothing is made per chunk either way.
import { context } from '@opentelemetry/api';
import {
  annotateActiveSpan,
  contextFrom,
  failSpan,
  inSpan,
  startSpan,
  SpanKind,
  traceCarrier,
  tracingEnabled,
  type Span,
} from '../../infra/tracing.js';
import { telemetryNameOf } from '../../providers/registry.js';
import { ProviderError, type Provider } from '../../providers/types.js';
import type { CompletionJob, PreparedJob } from './completion-job.js';

const REQUEST_ID = 'app.request.id';
const ACCOUNT_ID = 'app.account.id';
const OUTCOME = 'app.outcome';

/** The limiter's decision for a request, in a span of its own; the server span learns the request's ids. */
export function traceAdmission<A extends { allowed: boolean; reason?: string }>(
  job: PreparedJob,
  admit: () => Promise<A>,
): Promise<A> {
  if (!tracingEnabled()) return admit();
  annotateActiveSpan(REQUEST_ID, job.id);
  annotateActiveSpan(ACCOUNT_ID, job.accountId);
  return inSpan('admission', async (span) => {
    span.setAttribute(REQUEST_ID, job.id);
    span.setAttribute(ACCOUNT_ID, job.accountId);
    span.setAttribute('app.tier', job.tier);
    const admission = await admit();
    span.setAttribute('app.admission.allowed', admission.allowed);
    if (admission.reason !== undefined) span.setAttribute('app.admission.reason', admission.reason);
    return admission;
  });
}

/** How a queued request's dispatch ended, as its spans record it; the failures mark the span failed. */
export type DispatchOutcome =
  'final' | 'done' | 'error' | 'gap' | 'silence' | 'cancelled' | 'detached' | 'no_worker' | 'queue_unavailable';
const FAILED: ReadonlySet<DispatchOutcome> = new Set(['error', 'gap', 'silence', 'no_worker', 'queue_unavailable']);

/** The web process's spans of a queued request: the wait for a worker, then the relay of its answer. */
export interface DispatchTrace {
  /** A worker has the job: the wait ends, the relay begins. */
  picked(): void;
  /** The dispatch is over (the first call counts). */
  ended(outcome: DispatchOutcome): void;
}

const NO_DISPATCH_TRACE: DispatchTrace = { picked() {}, ended() {} };

/**
 * Starts the wait-in-the-queue span and puts the active (server) span's trace context in the job's
 * data, so the worker's spans join this request's trace. Call it before the job is queued.
 */
export function traceDispatch(job: CompletionJob, queueName: string): DispatchTrace {
  if (!tracingEnabled()) return NO_DISPATCH_TRACE;
  job.trace = traceCarrier();
  const parent = context.active();
  const wait = startSpan('queue wait', SpanKind.PRODUCER, parent);
  wait.setAttribute('messaging.system', 'bullmq');
  wait.setAttribute('messaging.operation.type', 'send');
  wait.setAttribute('messaging.destination.name', queueName);
  wait.setAttribute('messaging.message.id', job.id);
  wait.setAttribute(REQUEST_ID, job.id);
  wait.setAttribute(ACCOUNT_ID, job.accountId);
  let relay: Span | undefined;
  let over = false;
  return {
    picked() {
      if (relay !== undefined || over) return;
      wait.end();
      relay = startSpan('relay', SpanKind.INTERNAL, parent);
      relay.setAttribute(REQUEST_ID, job.id);
    },
    ended(outcome) {
      if (over) return;
      over = true;
      const span = relay ?? wait;
      span.setAttribute(OUTCOME, outcome);
      if (FAILED.has(outcome)) failSpan(span, outcome);
      span.end();
    },
  };
}

/** Job outcomes that mean the client did not get its answer. */
const FAILED_JOB = new Set(['failed', 'interrupted', 'expired']);

/**
 * Runs a worker's job inside its span, a child of the web's server span when the job carries its
 * trace context: the upstream call's and the record's spans, and the job's log lines, join it.
 */
export function traceJob<T extends string>(job: CompletionJob, mayBeRerun: boolean, run: () => Promise<T>): Promise<T> {
  if (!tracingEnabled()) return run();
  return inSpan(
    'completion job',
    async (span) => {
      span.setAttribute('messaging.system', 'bullmq');
      span.setAttribute('messaging.operation.type', 'process');
      span.setAttribute('messaging.message.id', job.id);
      span.setAttribute(REQUEST_ID, job.id);
      span.setAttribute(ACCOUNT_ID, job.accountId);
      span.setAttribute('app.queue.shard', job.shard);
      span.setAttribute('app.job.may_be_rerun', mayBeRerun);
      const outcome = await run();
      span.setAttribute(OUTCOME, outcome);
      if (FAILED_JOB.has(outcome)) failSpan(span, outcome);
      return outcome;
    },
    SpanKind.CONSUMER,
    contextFrom(job.trace),
  );
}

/** How an upstream call ended, for its span. */
export interface UpstreamResult {
  status: 'completed' | 'failed' | 'cancelled';
  failure: unknown;
  /** Why it was cancelled (the abort reason), when it was. */
  cancelCause: string | undefined;
  /** The model the provider says answered, when it said. */
  responseModel: string | undefined;
  inputTokens: number;
  outputTokens: number;
  /** Each choice's finish reason and the names of the tools it called. */
  choices: readonly { finish: string | null; calls?: readonly { name: string }[] }[];
  /** performance.now() at the start of the attempt that answered, and at its first token. */
  attemptStartedAt: number;
  firstTokenAt: number | undefined;
  endedAt: number;
}

/** The span of a completion's call to its model provider, all retries included. */
export interface UpstreamTrace {
  /** An attempt failed before the first token and is tried again. */
  retrying(attempt: number, err: unknown): void;
  end(result: UpstreamResult): void;
}

const errorType = (err: unknown): string =>
  err instanceof ProviderError ? String(err.status) : err instanceof Error ? err.name : 'Error';

/**
 * Starts the upstream call's span (OpenTelemetry's GenAI conventions: `chat {model}`, kind client)
 * under the active (job) span, from `startedAt` (performance.now(), when the request went out).
 * Undefined when tracing is off, so a caller's `?.end({...})` does not even build its argument.
 */
export function traceUpstream(job: CompletionJob, upstream: Provider, startedAt: number): UpstreamTrace | undefined {
  if (!tracingEnabled()) return undefined;
  const p = job.params;
  const span = startSpan(`chat ${p.model}`, SpanKind.CLIENT, undefined, startedAt);
  // Its plug-in's telemetry name (registry.ts): this module keeps no list of providers.
  const provider = telemetryNameOf(upstream);
  span.setAttribute('gen_ai.operation.name', 'chat');
  span.setAttribute('gen_ai.provider.name', provider);
  // The attribute's earlier name, still what many tracing back ends read.
  span.setAttribute('gen_ai.system', provider);
  span.setAttribute('gen_ai.request.model', p.model);
  span.setAttribute('gen_ai.output.type', 'text');
  if (p.max_tokens !== undefined) span.setAttribute('gen_ai.request.max_tokens', p.max_tokens);
  if (p.temperature !== undefined) span.setAttribute('gen_ai.request.temperature', p.temperature);
  if (p.top_p !== undefined) span.setAttribute('gen_ai.request.top_p', p.top_p);
  if (p.presence_penalty !== undefined) span.setAttribute('gen_ai.request.presence_penalty', p.presence_penalty);
  if (p.frequency_penalty !== undefined) span.setAttribute('gen_ai.request.frequency_penalty', p.frequency_penalty);
  if (p.n !== undefined && p.n !== 1) span.setAttribute('gen_ai.request.choice.count', p.n);
  if (p.seed !== undefined) span.setAttribute('gen_ai.request.seed', p.seed);
  // Tool names only: a definition's description and a call's arguments are the client's content.
  if (p.tools)
    span.setAttribute(
      'app.request.tools',
      p.tools.map((t) => t.function.name),
    );
  if (p.response_format) span.setAttribute('gen_ai.output.type', 'json');
  span.setAttribute(REQUEST_ID, job.id);
  span.setAttribute(ACCOUNT_ID, job.accountId);
  span.setAttribute('app.stream', job.stream);
  return {
    retrying(attempt, err) {
      span.addEvent('retry', { 'app.attempt': attempt, 'error.type': errorType(err) });
    },
    end(r) {
      if (r.responseModel !== undefined) span.setAttribute('gen_ai.response.model', r.responseModel);
      span.setAttribute('gen_ai.usage.input_tokens', r.inputTokens);
      span.setAttribute('gen_ai.usage.output_tokens', r.outputTokens);
      const reasons = r.choices.flatMap((c) => (c.finish === null ? [] : [c.finish]));
      if (reasons.length > 0) span.setAttribute('gen_ai.response.finish_reasons', reasons);
      const called = r.choices.flatMap((c) => (c.calls ?? []).filter(Boolean).map((call) => call.name));
      if (called.length > 0) span.setAttribute('app.response.tool_calls', called);
      if (r.firstTokenAt !== undefined) {
        span.setAttribute('gen_ai.response.time_to_first_chunk', (r.firstTokenAt - r.attemptStartedAt) / 1000);
        span.addEvent('gen_ai.first_chunk', r.firstTokenAt);
      }
      span.setAttribute(OUTCOME, r.status);
      if (r.status === 'failed') failSpan(span, errorType(r.failure));
      if (r.status === 'cancelled' && r.cancelCause !== undefined) span.setAttribute('app.cancel.cause', r.cancelCause);
      span.end(r.endedAt);
    },
  };
}

/** Records a request's usage and publishes its end, in a span of its own. */
export function traceRecord(job: CompletionJob, status: string, record: () => Promise<void>): Promise<void> {
  if (!tracingEnabled()) return record();
  return inSpan('record usage', async (span) => {
    span.setAttribute(REQUEST_ID, job.id);
    span.setAttribute('app.usage.status', status);
    await record();
  });
}
