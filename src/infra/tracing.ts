// OpenTelemetry traces. Off (no OTLP endpoint, or OTEL_SDK_DISABLED) the SDK is never loaded and
// every helper here returns at its first line: the request path pays for one check of a variable.
// On, each process registers one tracer provider that sends spans in batches over OTLP/HTTP (JSON).
// Spans are made by hand at a few points of a completion's life (docs/operations.md#traces), not by
// auto-instrumentation: instrumenting every Redis command or query would cost CPU on the hot path.
import { hostname } from 'node:os';
import {
  context,
  INVALID_SPAN_CONTEXT,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Context,
  type Span,
  type TimeInput,
  type Tracer,
} from '@opentelemetry/api';
import type { SpanExporter } from '@opentelemetry/sdk-trace-node';
import type { Config } from '../config.js';
import { OutageLog, type OutageLogger } from './outage.js';

export { SpanKind, type Span };

const SERVICE_VERSION = '1.0.0';

/** The W3C trace context of a span, as it travels in a queued job's data to another process. */
export interface TraceCarrier {
  traceparent?: string;
  tracestate?: string;
}

export interface Tracing {
  /** Sends the spans still buffered, stops the exporter and turns tracing off (a process's last step). */
  shutdown(): Promise<void>;
}

/** Set once tracing is on in this process; while undefined every helper is a no-op. */
let tracer: Tracer | undefined;

/** The span helpers hand out when tracing is off: it records nothing, and its methods do nothing. */
export const NO_SPAN: Span = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

export function tracingEnabled(): boolean {
  return tracer !== undefined;
}

/**
 * Loads the SDK and registers it for this process when config.tracing says so, before the process
 * starts work; otherwise loads nothing. Export failures are two warnings per outage (OutageLog),
 * not a line per failed batch.
 */
export async function startTracing(
  config: Pick<Config, 'tracing' | 'env'>,
  role: string,
  log: OutageLogger & { info(obj: object, msg: string): void },
): Promise<Tracing> {
  const settings = config.tracing;
  if (!settings.enabled || settings.endpoint === undefined) return { shutdown: () => Promise.resolve() };
  const [sdk, { OTLPTraceExporter }, { defaultResource, resourceFromAttributes }] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
  ]);
  const ratio = () => new sdk.TraceIdRatioBasedSampler(settings.samplerRatio);
  const samplers = {
    always_on: () => new sdk.AlwaysOnSampler(),
    always_off: () => new sdk.AlwaysOffSampler(),
    traceidratio: ratio,
    parentbased_always_on: () => new sdk.ParentBasedSampler({ root: new sdk.AlwaysOnSampler() }),
    parentbased_always_off: () => new sdk.ParentBasedSampler({ root: new sdk.AlwaysOffSampler() }),
    parentbased_traceidratio: () => new sdk.ParentBasedSampler({ root: ratio() }),
  } satisfies Record<Config['tracing']['sampler'], unknown>;
  const exporter = reportingOutages(
    new OTLPTraceExporter({ url: settings.endpoint }),
    new OutageLog(log, 'OTLP endpoint'),
  );
  const provider = new sdk.NodeTracerProvider({
    resource: defaultResource().merge(
      resourceFromAttributes({
        'service.name': settings.serviceName ?? `completions-${role}`,
        'service.version': SERVICE_VERSION,
        // The role stays visible when OTEL_SERVICE_NAME gives every process one name.
        'service.instance.id': `${role}-${hostname()}-${process.pid}`,
        'deployment.environment.name': config.env,
        'process.pid': process.pid,
      }),
    ),
    sampler: samplers[settings.sampler](),
    spanProcessors: [new sdk.BatchSpanProcessor(exporter, settings.batch)],
  });
  // The async-hooks context manager (a span active across awaits) and the W3C trace context propagator.
  provider.register();
  tracer = trace.getTracer('completions-service', SERVICE_VERSION);
  log.info(
    { endpoint: settings.endpoint, sampler: settings.sampler, ratio: settings.samplerRatio },
    'tracing: sending spans over OTLP/HTTP',
  );
  return {
    async shutdown() {
      await provider.shutdown();
      // Back to off, as before start: the span helpers do nothing and the globals are released.
      tracer = undefined;
      trace.disable();
      context.disable();
      propagation.disable();
    },
  };
}

/** The exporter, with each batch's outcome told to the outage log. */
function reportingOutages(exporter: SpanExporter, outage: OutageLog): SpanExporter {
  return {
    export(spans, done) {
      exporter.export(spans, (result) => {
        // A failed export always carries its error.
        if (result.error === undefined) outage.recovered();
        else outage.failure('span export', result.error);
        done(result);
      });
    },
    shutdown: () => exporter.shutdown(),
    forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve(),
  };
}

/** Starts a span under `parent` (by default the active span); NO_SPAN when tracing is off. */
export function startSpan(
  name: string,
  kind: SpanKind = SpanKind.INTERNAL,
  parent?: Context,
  startTime?: TimeInput,
): Span {
  return tracer === undefined ? NO_SPAN : tracer.startSpan(name, { kind, startTime }, parent ?? context.active());
}

/** Runs `fn` with `span` active (under `parent`): child spans and log lines inside it join the span. */
export function withSpan<T>(span: Span, fn: () => T, parent: Context = context.active()): T {
  return tracer === undefined ? fn() : context.with(trace.setSpan(parent, span), fn);
}

/**
 * Runs `fn` inside a new span, active for it, and ends the span when `fn` settles (a throw marks it
 * failed, by the error's name: messages can quote what a client sent).
 */
export async function inSpan<T>(
  name: string,
  fn: (span: Span) => Promise<T>,
  kind: SpanKind = SpanKind.INTERNAL,
  parent?: Context,
): Promise<T> {
  if (tracer === undefined) return fn(NO_SPAN);
  const from = parent ?? context.active();
  const span = tracer.startSpan(name, { kind }, from);
  try {
    return await context.with(trace.setSpan(from, span), () => fn(span));
  } catch (err) {
    failSpan(span, err instanceof Error ? err.name : 'Error');
    throw err;
  } finally {
    span.end();
  }
}

/** Marks a span failed, with a short, low-cardinality `error.type` (a code or a class name, never a message). */
export function failSpan(span: Span, errorType: string): void {
  span.setStatus({ code: SpanStatusCode.ERROR });
  span.setAttribute('error.type', errorType);
}

/** Sets an attribute on the active span, when tracing is on and one is active. */
export function annotateActiveSpan(key: string, value: string | number | boolean): void {
  if (tracer !== undefined) trace.getActiveSpan()?.setAttribute(key, value);
}

/** The active span's trace context, to hand to another process; undefined when tracing is off. */
export function traceCarrier(): TraceCarrier | undefined {
  if (tracer === undefined) return undefined;
  const carrier: TraceCarrier = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent === undefined ? undefined : carrier;
}

/** The context a carrier from another process describes (the root context when there is none). */
export function contextFrom(carrier: TraceCarrier | undefined): Context {
  return carrier === undefined || tracer === undefined ? ROOT_CONTEXT : propagation.extract(ROOT_CONTEXT, carrier);
}

/** The trace id of a span when it is sampled (its trace is exported), for log lines. */
export function sampledTraceId(span: Span): string | undefined {
  const c = span.spanContext();
  return (c.traceFlags & TraceFlags.SAMPLED) !== 0 ? c.traceId : undefined;
}

/**
 * The logger's mixin when tracing is on: the ids of the span active where a line is written, when
 * its trace is sampled. A new object each time: pino merges the line's own fields into it.
 */
export function traceLogFields(): { traceId?: string; spanId?: string } {
  const span = tracer === undefined ? undefined : trace.getSpan(context.active());
  const traceId = span === undefined ? undefined : sampledTraceId(span);
  return traceId === undefined ? {} : { traceId, spanId: span!.spanContext().spanId };
}
