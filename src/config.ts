// The only reader of process.env. Everything is validated once, at start-up, into a frozen,
// grouped object; a bad value stops the process with one line naming the variable.
// Each provider's variables come from its plug-in's settings schema. The list and its plug-ins
// import nothing at run time (adapters load with the registry), so config.ts stays at the bottom.
import type { ProviderPlugin, Setting, SettingsOf, SettingsSchema } from './providers/plugin.js';
import { PROVIDERS, type ProviderSettings } from './providers/providers.js';
import { readOrCreateLocalSecret } from './local-secret.js';

export type Env = Record<string, string | undefined>;

const MIB = 1024 * 1024;

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    expected: string,
    got: string | undefined,
  ) {
    super(`${variable} must be ${expected}${got === undefined ? ' (it is not set)' : ` (got ${JSON.stringify(got)})`}`);
    this.name = 'ConfigError';
  }
}

export type NodeEnv = 'development' | 'test' | 'production';
export type MailTransport = 'dev-outbox' | 'postmark';
export type ModelBackend = 'local' | 'catalog';
/** OTEL_TRACES_SAMPLER's values this service honours (OpenTelemetry's standard names). */
export const TRACE_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export type TraceSampler = (typeof TRACE_SAMPLERS)[number];

export interface TierLimits {
  requestsPerMinute: number;
  requestsPerHour: number;
  requestsPerDay: number;
  tokensPerDay: number;
}

/** An abuse budget's allowance in a minute from its first request. */
export interface BudgetAllowance {
  requestsPerMinute: number;
  /** Request body bytes (decompressed), counted as announced and corrected once read. */
  bytesPerMinute: number;
}

export interface Config {
  env: NodeEnv;
  http: {
    host: string;
    port: number;
    /** Base of links we hand out (verification email, Stripe return URLs). */
    publicBaseUrl: string;
    shutdownTimeoutMs: number;
    trustProxy: boolean;
    /** How long a client may take to send a request's headers, and its headers and body (408 after). */
    headersTimeoutMs: number;
    requestTimeoutMs: number;
    /** Browser origins (scheme://host[:port]) allowed to call the API cross-origin: the web frontend. */
    corsOrigins: string[];
    /**
     * Decompressed bytes of the request bodies one process reads and holds at once, at most: a body
     * that does not fit is answered 503 (the heap bound in docs/security.md is drawn from it).
     */
    bodyBytesInFlight: number;
    /** A compressed body inflates to at most this many times its bytes on the wire (past its first MiB). */
    bodyMaxInflateRatio: number;
  };
  log: { level: string };
  db: {
    url: string;
    /** Connections for queries and short transactions, at most, per process. */
    poolSize: number;
    /** Connections for lock-holding transactions (an account's invoicing, a scheduled run's claim), at most, per process. */
    lockPoolSize: number;
    /** Sent as each connection's statement_timeout; 0 sends none, leaving the server's (the role's or database's) own. */
    statementTimeoutMs: number;
  };
  redis: {
    /** One server; unused when clusterNodes is set. */
    url: string;
    /** Seed nodes of a Redis Cluster (REDIS_CLUSTER_NODES); empty for one server. */
    clusterNodes: { host: string; port: number }[];
    prefix: string;
    /** How many completion queues and usage streams the work is spread over (each its own hash slot). */
    shards: number;
  };
  auth: {
    jwt: {
      /**
       * JWT_SECRET; outside production without it (and without JWT_JWKS_URL), the random secret
       * kept in JWT_SECRET_FILE (default var/jwt-secret), made on first start. Nothing built in.
       */
      secret: string | undefined;
      jwksUrl: string | undefined;
      algorithms: string[];
      issuer: string | undefined;
      audience: string | undefined;
      mintTtlSeconds: number;
    };
    verifyTokenTtlMs: number;
    regenerateWindowMs: number;
  };
  /** Stored Responses API objects (docs/api.md#stored-responses). */
  responses: {
    /** A stored response is kept this long after it was created, then deleted. */
    retentionDays: number;
  };
  /** Signing in to the console (docs/console.md#sessions-and-security). */
  console: {
    /** A sign-in link works once, for this long. */
    signInLinkTtlMs: number;
    /** A session ends after this long without a request… */
    sessionIdleMs: number;
    /** …and this long after it started, whatever its activity. */
    sessionMaxMs: number;
    /** Lifetime of the JWTs POST /console/token hands the signed-in page. */
    jwtTtlSeconds: number;
  };
  mail: {
    transport: MailTransport;
    from: string;
    devDir: string;
    postmark: { serverToken: string | undefined; apiBase: string | undefined };
    maxAttempts: number;
    /** How long one send may take before it counts as a failed attempt (a hung provider). */
    sendTimeoutMs: number;
  };
  catalog: { modelsFile: string };
  /** Besides these, each provider's settings under its name (`providers.openai.apiKey`), from its plug-in. */
  providers: {
    /** The plug-ins whose settings were read: providers.ts's list (a test may add its own). */
    plugins: readonly ProviderPlugin[];
    backend: ModelBackend;
    requestTimeoutMs: number;
    maxRetries: number;
  } & ProviderSettings;
  /** Worker threads for CPU-heavy request work (providers/compute-pool.ts), per process, started on first use. */
  compute: {
    threads: number;
    /** Each thread's heap: a task that needs more ends with its thread. */
    threadHeapMb: number;
  };
  queue: {
    workerConcurrency: number;
    maxDepth: number;
    pickupTimeoutMs: number;
    heartbeatMs: number;
    /** How long a worker holds a finished request's record for Redis before writing its usage to Postgres directly. */
    redisOutageMaxMs: number;
    /** How long a process's liveness key lives without renewal (it is renewed four times as often). */
    livenessTtlMs: number;
    /** How long a request's relay log and state are kept after it ends (late readers, resumed streams). */
    relayLogTtlSeconds: number;
    /** How long a stream's tokens after its first may wait to travel together (0: each event-loop turn). */
    relayCoalesceMs: number;
    /**
     * How often a web process tells the workers what it handed to its clients: a stream's messages
     * past the last such acknowledgement and one more wait for the next (see chat/relay/acks.ts).
     */
    relayAckIntervalMs: number;
    /**
     * How long a resumable stream (stream_options.resumable) runs on after its last reader left
     * before it is cancelled like any stream whose client went away.
     */
    resumeGraceSeconds: number;
    /** How far a stream's client may fall behind (bytes written but not yet sent) before the stream is ended. */
    streamMaxBufferedBytes: number;
    /** How often BullMQ looks for jobs whose worker stopped renewing their lock. */
    stalledIntervalMs: number;
    /** How long a job's queue lock lasts unless its worker renews it (derived: see lockDurationMs). */
    lockDurationMs: number;
    /**
     * How long after its admission a job handed out again with no trace of an earlier run is still
     * run: beyond it the request ended long ago and its state expired (see chat/job/take-over.ts).
     */
    rerunHorizonMs: number;
  };
  limits: {
    paid: TierLimits;
    /** Completion tokens reserved at admission when the request sets no max_tokens. */
    defaultCompletionReservation: number;
    reservationTtlMs: number;
    /** How long a settled request is remembered, so a repeated settlement is ignored (see settledMarkerTtlMs below). */
    settledMarkerTtlMs: number;
    signup: { perAddressPerHour: number; perClientPerHour: number };
    /** Sign-in links asked for (each sends an email), per mailbox and per client network. */
    signIn: { perAddressPerHour: number; perClientPerHour: number };
    /**
     * Every request, whatever its answer, counted before its body is read: per account by tier, and
     * per client network for requests without a valid credential (docs/limits.md#abuse-budget).
     */
    abuseBudget: Record<'free' | 'paid' | 'client', BudgetAllowance>;
    /**
     * Reading completions back (retrieval and resumed streams): reads per account per UTC minute,
     * and resumed streams following one completion at once.
     */
    completionReads: { perMinute: number; maxReadersPerCompletion: number };
  };
  stripe: {
    secretKey: string | undefined;
    webhookSecret: string | undefined;
    priceId: string | undefined;
    apiBase: string | undefined;
    timeoutMs: number;
    /** Automatic retries of a failed Stripe call (with our idempotency keys, so never a double write). */
    maxNetworkRetries: number;
    /** Stripe API calls per second, at most, across every process of the deployment (Stripe answers 429 above its own limit). */
    maxOpsPerSecond: number;
    /** How long a web request waits for its turn under maxOpsPerSecond before it is answered 503 (workers wait on). */
    paceMaxWaitMs: number;
    /** Checkout returns (upgrade-success, payment-method-success: no credential) per client network per minute. */
    returnsPerClientPerMinute: number;
    /** Checkout returns per checkout session id per minute. */
    returnsPerSessionPerMinute: number;
    /** New setup intents per account per day (an open one is handed out again instead). */
    setupIntentsPerAccountPerDay: number;
    /** New card-change checkout sessions per account per day (an open one is handed out again instead). */
    cardCheckoutsPerAccountPerDay: number;
    currency: string;
  };
  invoicing: {
    /** Accounts one worker process invoices at once (each holds a lock connection while it runs). */
    concurrency: number;
    /** Attempts of one account's job in a monthly run, the first included. */
    attempts: number;
    /** Delay before an account job's first retry; each further retry waits twice as long. */
    retryDelayMs: number;
  };
  /** Failpoints for crash-recovery tests (FAULT_INJECT); never set in production. */
  faults: {
    crashBeforeRecord: boolean;
    crashAfterInvoiceItem: boolean;
    /** A completion whose `user` field equals this blocks its worker's event loop for good (FAULT_BLOCK_WORKER_USER). */
    blockWorkerForUser: string | undefined;
    /** Tests of several processes only: every process's clock stands still at this instant (TEST_CLOCK_AT). */
    clockAt: Date | undefined;
  };
  worker: { metricsPort: number | undefined };
  /** How a role ends: its own shutdown bound, its supervisor, its event loop's health (docs/operations.md#shutdown). */
  lifecycle: {
    /** The supervisor that started this role (SUPERVISOR_PID, set by npm start): the role exits once it is gone. */
    supervisorPid: number | undefined;
    /** A worker whose event loop has not turned for this long is ended, so its jobs are taken over (0: never). */
    workerStallTimeoutMs: number;
    /** /health answers 503 when no live worker's event loop lags less than this. */
    healthMaxLagMs: number;
  };
  /** The operators' queue dashboard at /admin/queues. */
  admin: {
    /** The operator credential (ADMIN_TOKEN); without it the dashboard does not exist (404). */
    token: string | undefined;
    /** The dashboard may retry, clean, pause and remove jobs; otherwise it only shows them. */
    queuesWritable: boolean;
  };
  /** OpenTelemetry traces, by OpenTelemetry's standard variables (docs/operations.md#traces). */
  tracing: {
    /** True when an OTLP endpoint is set and OTEL_SDK_DISABLED is not: only then is the SDK loaded. */
    enabled: boolean;
    /** Where spans are sent (OTLP/HTTP, JSON): the traces endpoint as given, else the base endpoint + /v1/traces. */
    endpoint: string | undefined;
    /** OTEL_SERVICE_NAME; unset, each role names itself completions-<role>. */
    serviceName: string | undefined;
    sampler: TraceSampler;
    /** The ratio of the traceidratio samplers, 0 to 1. */
    samplerRatio: number;
    /** The batch span processor's settings (OTEL_BSP_*). */
    batch: {
      scheduledDelayMillis: number;
      exportTimeoutMillis: number;
      maxQueueSize: number;
      maxExportBatchSize: number;
    };
  };
  scheduler: {
    invoiceCron: string;
    reconcileCron: string;
    rollupCron: string;
    /** Deletes spent sign-in links and ended console sessions. */
    signInCleanupCron: string;
    /** Deletes stored responses past RESPONSES_RETENTION_DAYS. */
    responsesCleanupCron: string;
    metricsPort: number | undefined;
  };
}

class Reader {
  constructor(private readonly env: Env) {}

  raw(name: string): string | undefined {
    const v = this.env[name];
    return v === undefined || v.trim() === '' ? undefined : v.trim();
  }

  str(name: string, fallback: string): string {
    return this.raw(name) ?? fallback;
  }

  optional(name: string): string | undefined {
    return this.raw(name);
  }

  int(name: string, fallback: number | undefined, min: number, max: number): number {
    const v = this.raw(name);
    if (v === undefined) {
      if (fallback === undefined) throw new ConfigError(name, `an integer from ${min} to ${max}`, v);
      return fallback;
    }
    if (!/^-?\d+$/.test(v) || Number(v) < min || Number(v) > max) {
      throw new ConfigError(name, `an integer from ${min} to ${max}`, v);
    }
    return Number(v);
  }

  optionalInt(name: string, min: number, max: number): number | undefined {
    return this.raw(name) === undefined ? undefined : this.int(name, undefined, min, max);
  }

  bool(name: string, fallback: boolean): boolean {
    const v = this.raw(name);
    if (v === undefined) return fallback;
    if (/^(1|true|yes|on)$/i.test(v)) return true;
    if (/^(0|false|no|off)$/i.test(v)) return false;
    throw new ConfigError(name, 'true or false', v);
  }

  oneOf<T extends string>(name: string, choices: readonly T[], fallback: T): T {
    const v = this.raw(name) ?? fallback;
    if (!choices.includes(v as T)) throw new ConfigError(name, `one of ${choices.join(', ')}`, v);
    return v as T;
  }

  url(name: string, fallback: string | undefined, protocols: string[]): string {
    const v = this.raw(name) ?? fallback;
    if (v === undefined) throw new ConfigError(name, `a URL (${protocols.join(' or ')})`, v);
    let parsed: URL;
    try {
      parsed = new URL(v);
    } catch {
      throw new ConfigError(name, `a URL (${protocols.join(' or ')})`, v);
    }
    if (!protocols.includes(parsed.protocol.replace(/:$/, ''))) {
      throw new ConfigError(name, `a URL (${protocols.join(' or ')})`, v);
    }
    return v.replace(/\/+$/, '');
  }

  optionalUrl(name: string, protocols: string[]): string | undefined {
    return this.raw(name) === undefined ? undefined : this.url(name, undefined, protocols);
  }

  list(name: string, fallback: string[]): string[] {
    const v = this.raw(name);
    return v === undefined
      ? fallback
      : v
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
  }

  /** A comma-separated list of browser origins, each exactly scheme://host[:port] as a browser sends it. */
  origins(name: string): string[] {
    return this.list(name, []).map((o) => {
      let origin: string | undefined;
      try {
        origin = new URL(o).origin;
      } catch {
        origin = undefined;
      }
      if (origin === undefined || origin === 'null' || origin !== o)
        throw new ConfigError(
          name,
          'a comma-separated list of origins such as https://app.example.com (no path, no trailing slash)',
          o,
        );
      return o;
    });
  }

  /** A provider's setting, as its plug-in's schema declares it (src/providers/plugin.ts). */
  setting(s: Setting): string | number | undefined {
    switch (s.kind) {
      case 'key':
        return this.optional(s.variable);
      case 'url':
        return this.optionalUrl(s.variable, ['http', 'https']);
      case 'int':
        return this.int(s.variable, s.fallback, s.min, s.max);
    }
  }

  settings<S extends SettingsSchema>(schema: S): SettingsOf<S> {
    return Object.fromEntries(Object.entries(schema).map(([field, s]) => [field, this.setting(s)])) as SettingsOf<S>;
  }

  cron(name: string, fallback: string): string {
    const v = this.str(name, fallback);
    if (v.split(/\s+/).length < 5 || v.split(/\s+/).length > 6)
      throw new ConfigError(name, 'a cron expression of 5 or 6 fields', v);
    return v;
  }
}

/**
 * Outside production with neither JWT_SECRET nor JWT_JWKS_URL: the checkout's own random secret,
 * kept in JWT_SECRET_FILE (default var/jwt-secret, from the working directory, as npm start runs
 * every process), made with mode 0600 on first start. No secret is written in the source, so a
 * token signed with one from the source is refused.
 */
function localJwtSecret(r: Reader): string {
  const file = r.str('JWT_SECRET_FILE', 'var/jwt-secret');
  const found = readOrCreateLocalSecret(file);
  if ('problem' in found) throw new ConfigError('JWT_SECRET_FILE', found.problem, file);
  return found.secret;
}

/**
 * DB_STATEMENT_TIMEOUT_MS, or 0: PgBouncer refuses statement_timeout as a startup parameter, so
 * behind it the service sends none and the role's own setting applies.
 */
function statementTimeout(r: Reader): number {
  const name = 'DB_STATEMENT_TIMEOUT_MS';
  const v = r.raw(name);
  if (v === undefined) return 10_000;
  if (v === '0') return 0;
  if (!/^\d+$/.test(v) || Number(v) < 100 || Number(v) > 600_000)
    throw new ConfigError(name, 'an integer from 100 to 600000, or 0 to leave it to the server', v);
  return Number(v);
}

const HS_ALGS = ['HS256', 'HS384', 'HS512'];
const ASYM_ALGS = ['RS256', 'RS384', 'RS512', 'PS256', 'ES256', 'ES384', 'EdDSA'];

/** `plugins`: the providers whose settings to read, providers.ts's list unless a test adds its own. */
export function loadConfig(env: Env = process.env, plugins: readonly ProviderPlugin[] = PROVIDERS): Config {
  const r = new Reader(env);
  const nodeEnv = r.oneOf<NodeEnv>('NODE_ENV', ['development', 'test', 'production'], 'development');
  const production = nodeEnv === 'production';

  const port = r.int('PORT', 8080, 0, 65535);
  const host = r.str('HOST', '127.0.0.1');
  const publicBaseUrl = r.url(
    'PUBLIC_BASE_URL',
    `http://${host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host}:${port}`,
    ['http', 'https'],
  );

  const devDefault = (name: string, local: string): string | undefined => {
    if (r.raw(name) === undefined && production) throw new ConfigError(name, 'set in production', undefined);
    return local;
  };
  const dbUrl = r.url(
    'DATABASE_URL',
    devDefault('DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/completions_dev'),
    ['postgres', 'postgresql'],
  );
  const clusterNodes = r.list('REDIS_CLUSTER_NODES', []).map((node) => {
    const m = /^(?<host>[^:\s]+|\[[0-9a-fA-F:]+\]):(?<port>\d{1,5})$/.exec(node);
    const port = Number(m?.groups?.port);
    if (!m || port < 1 || port > 65535)
      throw new ConfigError('REDIS_CLUSTER_NODES', 'a comma-separated list of host:port', node);
    return { host: m.groups!.host!.replace(/^\[|\]$/g, ''), port };
  });
  if (clusterNodes.length > 0 && r.raw('REDIS_URL') !== undefined) {
    throw new ConfigError('REDIS_URL', 'unset when REDIS_CLUSTER_NODES is set (one or the other)', r.raw('REDIS_URL'));
  }
  const redisUrl =
    clusterNodes.length > 0
      ? ''
      : r.url('REDIS_URL', devDefault('REDIS_URL', 'redis://127.0.0.1:6379'), ['redis', 'rediss']);
  const redisPrefix = r.str('REDIS_PREFIX', 'svc');
  // The prefix is part of every hash tag ({prefix:…}); a brace in it would change which part of a key is hashed.
  if (/[{}]/.test(redisPrefix)) throw new ConfigError('REDIS_PREFIX', 'without { or }', redisPrefix);

  const jwtSecret = r.optional('JWT_SECRET');
  const jwksUrl = r.optionalUrl('JWT_JWKS_URL', ['http', 'https']);
  if (jwtSecret !== undefined && jwtSecret.length < 32)
    throw new ConfigError('JWT_SECRET', 'at least 32 characters', '<hidden>');
  if (jwtSecret !== undefined && jwksUrl !== undefined)
    throw new ConfigError('JWT_JWKS_URL', 'unset when JWT_SECRET is set (choose one)', jwksUrl);
  if (jwtSecret === undefined && jwksUrl === undefined && production) {
    throw new ConfigError('JWT_SECRET', 'set in production (or JWT_JWKS_URL)', undefined);
  }
  const issuer = r.optional('JWT_ISSUER');
  const audience = r.optional('JWT_AUDIENCE');
  // An identity provider signs tokens for many applications: without these, any token it issued
  // to anyone for anything would open this API.
  if (jwksUrl !== undefined && issuer === undefined)
    throw new ConfigError('JWT_ISSUER', "set with JWT_JWKS_URL (the identity provider's issuer, `iss`)", undefined);
  if (jwksUrl !== undefined && audience === undefined)
    throw new ConfigError('JWT_AUDIENCE', 'set with JWT_JWKS_URL (this API as the tokens name it, `aud`)', undefined);
  const defaultAlgs = jwksUrl !== undefined ? ['RS256', 'ES256'] : ['HS256'];
  const algorithms = r.list('JWT_ALGORITHMS', defaultAlgs);
  const allowed = jwksUrl !== undefined ? ASYM_ALGS : HS_ALGS;
  for (const a of algorithms) {
    if (!allowed.includes(a))
      throw new ConfigError(
        'JWT_ALGORITHMS',
        `a list of ${allowed.join('/')} for the configured key`,
        algorithms.join(','),
      );
  }

  const mailTransport = r.oneOf<MailTransport>(
    'MAIL_TRANSPORT',
    ['dev-outbox', 'postmark'],
    production ? 'postmark' : 'dev-outbox',
  );
  const postmarkToken = r.optional('POSTMARK_SERVER_TOKEN');
  if (mailTransport === 'postmark' && postmarkToken === undefined) {
    throw new ConfigError('POSTMARK_SERVER_TOKEN', 'set when MAIL_TRANSPORT is postmark', undefined);
  }

  // auto: with no provider key on a non-production machine every model is served by the
  // built-in local model, so the whole product works offline.
  const backendSetting = r.oneOf('MODEL_BACKEND', ['auto', 'local', 'catalog'], 'auto');
  const anyKey = plugins.some((p) =>
    Object.values(p.settings).some((s: Setting) => s.kind === 'key' && r.optional(s.variable) !== undefined),
  );
  const backend: ModelBackend =
    backendSetting === 'auto' ? (anyKey || production ? 'catalog' : 'local') : backendSetting;

  const headersTimeoutMs = r.int('HTTP_HEADERS_TIMEOUT_MS', 20_000, 100, 600_000);
  if (r.int('HTTP_REQUEST_TIMEOUT_MS', 60_000, 100, 600_000) < headersTimeoutMs) {
    throw new ConfigError(
      'HTTP_REQUEST_TIMEOUT_MS',
      `at least HTTP_HEADERS_TIMEOUT_MS (${headersTimeoutMs})`,
      r.raw('HTTP_REQUEST_TIMEOUT_MS'),
    );
  }

  const config: Config = {
    env: nodeEnv,
    http: {
      host,
      port,
      publicBaseUrl,
      shutdownTimeoutMs: supervisorSettings(env).shutdownTimeoutMs,
      trustProxy: r.bool('TRUST_PROXY', false),
      headersTimeoutMs: r.int('HTTP_HEADERS_TIMEOUT_MS', 20_000, 100, 600_000),
      requestTimeoutMs: r.int('HTTP_REQUEST_TIMEOUT_MS', 60_000, 100, 600_000),
      corsOrigins: r.origins('CORS_ORIGINS'),
      bodyBytesInFlight: r.int('HTTP_BODY_BYTES_IN_FLIGHT', 192 * MIB, 64 * MIB, 64 * 1024 * MIB),
      bodyMaxInflateRatio: r.int('HTTP_BODY_MAX_INFLATE_RATIO', 100, 2, 100_000),
    },
    log: {
      level: r.oneOf(
        'LOG_LEVEL',
        ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
        nodeEnv === 'test' ? 'warn' : 'info',
      ),
    },
    db: {
      url: dbUrl,
      poolSize: r.int('DB_POOL_SIZE', 10, 1, 200),
      lockPoolSize: lockPoolSize(r),
      statementTimeoutMs: statementTimeout(r),
    },
    redis: { url: redisUrl, clusterNodes, prefix: redisPrefix, shards: r.int('REDIS_SHARDS', 1, 1, 256) },
    auth: {
      jwt: {
        secret: jwtSecret ?? (production || jwksUrl !== undefined ? undefined : localJwtSecret(r)),
        jwksUrl,
        algorithms,
        issuer,
        audience,
        mintTtlSeconds: r.int('JWT_MINT_TTL_SECONDS', 900, 60, 86_400),
      },
      verifyTokenTtlMs: r.int('VERIFY_TOKEN_TTL_HOURS', 24, 1, 24 * 30) * 3_600_000,
      regenerateWindowMs: 2 * 3_600_000,
    },
    responses: {
      retentionDays: r.int('RESPONSES_RETENTION_DAYS', 30, 1, 400),
    },
    console: {
      signInLinkTtlMs: 15 * 60_000,
      sessionIdleMs: r.int('CONSOLE_SESSION_IDLE_MINUTES', 12 * 60, 5, 30 * 24 * 60) * 60_000,
      sessionMaxMs: r.int('CONSOLE_SESSION_MAX_HOURS', 7 * 24, 1, 90 * 24) * 3_600_000,
      jwtTtlSeconds: r.int('CONSOLE_JWT_TTL_SECONDS', 300, 30, 3600),
    },
    mail: {
      transport: mailTransport,
      from: r.str('MAIL_FROM', 'Completions <no-reply@completions.local>'),
      devDir: r.str('MAIL_DEV_DIR', 'var/mail'),
      postmark: { serverToken: postmarkToken, apiBase: r.optionalUrl('POSTMARK_API_BASE', ['http', 'https']) },
      maxAttempts: r.int('MAIL_MAX_ATTEMPTS', 8, 1, 100),
      sendTimeoutMs: r.int('MAIL_SEND_TIMEOUT_MS', 30_000, 100, 600_000),
    },
    catalog: { modelsFile: r.str('MODELS_FILE', 'config/models.json') },
    providers: {
      plugins,
      backend,
      ...(Object.fromEntries(plugins.map((p) => [p.name, r.settings(p.settings)])) as ProviderSettings),
      requestTimeoutMs: r.int('UPSTREAM_TIMEOUT_MS', 120_000, 1000, 3_600_000),
      maxRetries: r.int('UPSTREAM_MAX_RETRIES', 2, 0, 10),
    },
    compute: {
      threads: r.int('COMPUTE_THREADS', 2, 1, 64),
      threadHeapMb: r.int('COMPUTE_THREAD_HEAP_MB', 512, 64, 16_384),
    },
    queue: {
      workerConcurrency: r.int('WORKER_CONCURRENCY', 1000, 1, 100_000),
      maxDepth: r.int('QUEUE_MAX_DEPTH', 2000, 1, 1_000_000),
      pickupTimeoutMs: r.int('QUEUE_PICKUP_TIMEOUT_MS', 10_000, 100, 600_000),
      heartbeatMs: r.int('STREAM_HEARTBEAT_MS', 15_000, 100, 600_000),
      streamMaxBufferedBytes: r.int('STREAM_MAX_BUFFERED_BYTES', 1024 * 1024, 16 * 1024, 256 * 1024 * 1024),
      redisOutageMaxMs: r.int('REDIS_OUTAGE_MAX_MS', 60_000, 1000, 3_600_000),
      livenessTtlMs: r.int('LIVENESS_TTL_MS', 2000, 300, 60_000),
      relayLogTtlSeconds: r.int('RELAY_LOG_TTL_SECONDS', 120, 10, 86_400),
      relayCoalesceMs: r.int('RELAY_COALESCE_MS', 4, 0, 100),
      relayAckIntervalMs: r.int('RELAY_ACK_INTERVAL_MS', 50, 5, 1000),
      resumeGraceSeconds: r.int('RESUME_GRACE_SECONDS', 60, 1, 3600),
      stalledIntervalMs: r.int('QUEUE_STALLED_INTERVAL_MS', 2000, 100, 600_000),
      rerunHorizonMs: 0,
      lockDurationMs: 0,
    },
    limits: {
      paid: {
        requestsPerMinute: r.int('PAID_REQUESTS_PER_MINUTE', 600, 1, 10_000_000),
        requestsPerHour: r.int('PAID_REQUESTS_PER_HOUR', 20_000, 1, 100_000_000),
        requestsPerDay: r.int('PAID_REQUESTS_PER_DAY', 200_000, 1, 1_000_000_000),
        tokensPerDay: r.int('PAID_TOKENS_PER_DAY', 50_000_000, 1, 1_000_000_000_000),
      },
      defaultCompletionReservation: r.int('DEFAULT_COMPLETION_RESERVATION', 4096, 1, 8192),
      reservationTtlMs: r.int('RESERVATION_TTL_MS', 15 * 60_000, 1000, 86_400_000),
      settledMarkerTtlMs: 0,
      signup: {
        perAddressPerHour: r.int('SIGNUP_PER_ADDRESS_PER_HOUR', 3, 1, 1000),
        perClientPerHour: r.int('SIGNUP_PER_CLIENT_PER_HOUR', 10, 1, 1_000_000),
      },
      signIn: {
        perAddressPerHour: r.int('SIGNIN_PER_ADDRESS_PER_HOUR', 5, 1, 1000),
        perClientPerHour: r.int('SIGNIN_PER_CLIENT_PER_HOUR', 20, 1, 1_000_000),
      },
      abuseBudget: abuseBudgets(r),
      completionReads: {
        perMinute: r.int('COMPLETION_READS_PER_MINUTE', 300, 1, 1_000_000),
        maxReadersPerCompletion: r.int('RESUME_MAX_READERS', 5, 1, 1000),
      },
    },
    stripe: {
      secretKey: r.optional('STRIPE_SECRET_KEY'),
      webhookSecret: r.optional('STRIPE_WEBHOOK_SECRET'),
      priceId: r.optional('STRIPE_PRICE_ID'),
      apiBase: r.optionalUrl('STRIPE_API_BASE', ['http', 'https']),
      timeoutMs: r.int('STRIPE_TIMEOUT_MS', 10_000, 100, 120_000),
      maxNetworkRetries: r.int('STRIPE_MAX_NETWORK_RETRIES', 2, 0, 5),
      maxOpsPerSecond: stripeMaxOps(r),
      paceMaxWaitMs: r.int('STRIPE_PACE_MAX_WAIT_MS', 3000, 0, 60_000),
      returnsPerClientPerMinute: r.int('STRIPE_RETURNS_PER_CLIENT_PER_MINUTE', 30, 1, 1_000_000),
      returnsPerSessionPerMinute: r.int('STRIPE_RETURNS_PER_SESSION_PER_MINUTE', 5, 1, 1000),
      setupIntentsPerAccountPerDay: r.int('STRIPE_SETUP_INTENTS_PER_ACCOUNT_PER_DAY', 10, 1, 10_000),
      cardCheckoutsPerAccountPerDay: r.int('STRIPE_CARD_CHECKOUTS_PER_ACCOUNT_PER_DAY', 10, 1, 10_000),
      currency: r.str('BILLING_CURRENCY', 'usd').toLowerCase(),
    },
    faults: {
      crashBeforeRecord: r.list('FAULT_INJECT', []).includes('crash-before-record'),
      crashAfterInvoiceItem: r.list('FAULT_INJECT', []).includes('crash-after-invoice-item'),
      blockWorkerForUser: r.optional('FAULT_BLOCK_WORKER_USER'),
      clockAt: testClockAt(r, nodeEnv),
    },
    invoicing: {
      concurrency: invoicingConcurrency(r),
      attempts: r.int('INVOICING_ATTEMPTS', 6, 1, 50),
      retryDelayMs: r.int('INVOICING_RETRY_DELAY_MS', 10_000, 10, 3_600_000),
    },
    worker: { metricsPort: r.optionalInt('WORKER_METRICS_PORT', 0, 65535) },
    lifecycle: {
      supervisorPid: r.optionalInt('SUPERVISOR_PID', 1, 2 ** 31 - 1),
      workerStallTimeoutMs: r.int('WORKER_STALL_TIMEOUT_MS', 15_000, 0, 3_600_000),
      healthMaxLagMs: r.int('HEALTH_MAX_EVENT_LOOP_LAG_MS', 1000, 10, 60_000),
    },
    admin: { token: adminToken(r), queuesWritable: r.bool('ADMIN_QUEUES_WRITABLE', false) },
    tracing: tracing(r),
    scheduler: {
      invoiceCron: r.cron('INVOICE_CRON', '15 0 1 * *'),
      reconcileCron: r.cron('RECONCILE_CRON', '30 3 * * *'),
      rollupCron: r.cron('ROLLUP_CRON', '5 * * * *'),
      signInCleanupCron: r.cron('SIGN_IN_CLEANUP_CRON', '40 3 * * *'),
      responsesCleanupCron: r.cron('RESPONSES_CLEANUP_CRON', '50 3 * * *'),
      metricsPort: r.optionalInt('SCHEDULER_METRICS_PORT', 0, 65535),
    },
  };
  config.queue.rerunHorizonMs = rerunHorizonMs(config.queue);
  config.queue.lockDurationMs = lockDurationMs(config.queue);
  config.limits.settledMarkerTtlMs = settledMarkerTtlMs(config.queue);
  return deepFreeze(config);
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object') {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

/**
 * How long past SHUTDOWN_TIMEOUT_MS a stopping role may take to close its connections and send its
 * last spans: past it the role exits non-zero, even with its event loop blocked (its watchdog thread
 * ends it).
 */
export const SHUTDOWN_GRACE_MS = 2000;

/**
 * What npm start's supervisor needs, read as the roles read it: it sends SIGKILL to a role still
 * running a second after that role's own bound (SHUTDOWN_TIMEOUT_MS + SHUTDOWN_GRACE_MS).
 */
export function supervisorSettings(env: Env = process.env): { shutdownTimeoutMs: number; killAfterMs: number } {
  const shutdownTimeoutMs = new Reader(env).int('SHUTDOWN_TIMEOUT_MS', 25_000, 0, 600_000);
  return { shutdownTimeoutMs, killAfterMs: shutdownTimeoutMs + SHUTDOWN_GRACE_MS + 1000 };
}

/** For entry points: load or print the one line that says what is wrong, then exit. */
export function loadConfigOrExit(env: Env = process.env): Config {
  try {
    return loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`configuration error: ${err.message}\n`);
      process.exit(78);
    }
    throw err;
  }
}

/**
 * A dead worker's job is found stalled once its lock has lapsed, at the second stalled-job check
 * after its last renewal: within lockDuration + stalledInterval of the death. The lock outlasts
 * two liveness TTLs (it is renewed every half lock), so by the time it lapses the dead worker's
 * liveness key has expired too and the job is taken over at once rather than declined as still
 * held. With the defaults (2 s checks, 2 s TTL: a 4 s lock): found within 6-8 s, taken over at 8 s,
 * four TTLs of silence (docs/faults.md has the figure for other settings).
 */
function lockDurationMs(q: Config['queue']): number {
  return Math.max(q.stalledIntervalMs, 2 * q.livenessTtlMs);
}

/**
 * A job handed out again before any worker claimed it (its first worker died at once) comes back
 * within the pickup wait plus a few stalled-job checks; a request's state, once it has ended, is
 * kept RELAY_LOG_TTL_SECONDS. A re-run with no state that is older than both is one whose state
 * expired, and is not run again.
 */
function rerunHorizonMs(q: Config['queue']): number {
  return Math.max(q.relayLogTtlSeconds * 1000, q.pickupTimeoutMs + 3 * q.stalledIntervalMs + 5000);
}

/**
 * A request is settled again only by its worker repeating its record (for up to
 * REDIS_OUTAGE_MAX_MS) or by a re-run, which sees the request recorded while its state lives and
 * runs nothing beyond the re-run horizon. Its settled marker outlives both, by a minute: at a
 * thousand requests a second that is a few hundred thousand small keys, not a day's worth.
 */
function settledMarkerTtlMs(q: Config['queue']): number {
  return Math.max(q.redisOutageMaxMs, rerunHorizonMs(q)) + 60_000;
}

/**
 * A clock that stands still, for tests that run several processes which must agree on the time
 * (rate-limit windows). Only under NODE_ENV=test: a stopped clock in production would break
 * every window and expiry.
 */
function testClockAt(r: Reader, nodeEnv: string): Date | undefined {
  const raw = r.raw('TEST_CLOCK_AT');
  if (raw === undefined) return undefined;
  if (nodeEnv !== 'test') throw new ConfigError('TEST_CLOCK_AT', 'unset outside NODE_ENV=test', raw);
  const at = new Date(raw);
  if (Number.isNaN(at.getTime())) throw new ConfigError('TEST_CLOCK_AT', 'an ISO 8601 instant', raw);
  return at;
}

/**
 * The operator credential travels as a bearer token and is typed into the dashboard's form: long
 * enough not to be guessed, and without spaces or control characters that a header would mangle.
 */
function adminToken(r: Reader): string | undefined {
  const v = r.optional('ADMIN_TOKEN');
  if (v !== undefined && !/^[\x21-\x7e]{32,}$/.test(v))
    throw new ConfigError('ADMIN_TOKEN', 'at least 32 printable ASCII characters without spaces', '<hidden>');
  return v;
}

/**
 * OpenTelemetry's own variables, read as its SDKs read them: the traces endpoint is used as given,
 * the base endpoint gets /v1/traces appended. Without either, tracing is off and costs nothing.
 */
function tracing(r: Reader): Config['tracing'] {
  const base = r.optionalUrl('OTEL_EXPORTER_OTLP_ENDPOINT', ['http', 'https']);
  const endpoint =
    r.optionalUrl('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', ['http', 'https']) ??
    (base === undefined ? undefined : `${base}/v1/traces`);
  const disabled = r.bool('OTEL_SDK_DISABLED', false);
  const sampler = r.oneOf<TraceSampler>('OTEL_TRACES_SAMPLER', TRACE_SAMPLERS, 'parentbased_always_on');
  const rawRatio = r.raw('OTEL_TRACES_SAMPLER_ARG');
  const samplerRatio = rawRatio === undefined ? 1 : Number(rawRatio);
  if (Number.isNaN(samplerRatio) || samplerRatio < 0 || samplerRatio > 1)
    throw new ConfigError('OTEL_TRACES_SAMPLER_ARG', 'a ratio from 0 to 1', rawRatio);
  const maxQueueSize = r.int('OTEL_BSP_MAX_QUEUE_SIZE', 2048, 1, 1_000_000);
  const maxExportBatchSize = r.int('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 512, 1, 1_000_000);
  if (maxExportBatchSize > maxQueueSize)
    throw new ConfigError(
      'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
      `at most OTEL_BSP_MAX_QUEUE_SIZE (${maxQueueSize})`,
      String(maxExportBatchSize),
    );
  return {
    enabled: endpoint !== undefined && !disabled,
    endpoint,
    serviceName: r.optional('OTEL_SERVICE_NAME'),
    sampler,
    samplerRatio,
    batch: {
      scheduledDelayMillis: r.int('OTEL_BSP_SCHEDULE_DELAY', 5000, 0, 3_600_000),
      exportTimeoutMillis: r.int('OTEL_BSP_EXPORT_TIMEOUT', 30_000, 1, 3_600_000),
      maxQueueSize,
      maxExportBatchSize,
    },
  };
}

const invoicingConcurrency = (r: Reader): number => r.int('INVOICING_CONCURRENCY', 8, 1, 100);

/**
 * Each account a worker invoices holds a lock connection for as long as it runs, and the monthly
 * run holds one more for its claim on the month: the default covers both. A smaller pool is
 * allowed (a web process needs two); a worker then invoices fewer accounts at once (see
 * invoicingSlots).
 */
const lockPoolSize = (r: Reader): number => r.int('DB_LOCK_POOL_SIZE', invoicingConcurrency(r) + 2, 2, 200);

/** Accounts a worker invoices at once: INVOICING_CONCURRENCY, as far as its lock pool allows beside a run's claim. */
export const invoicingSlots = (c: Pick<Config, 'db' | 'invoicing'>): number =>
  Math.max(1, Math.min(c.invoicing.concurrency, c.db.lockPoolSize - 1));

/**
 * Stripe allows about 100 operations per second in live mode and 25 in test mode; the default
 * stays under the mode's limit (other Stripe traffic of the same Stripe account shares it).
 */
/**
 * The abuse budgets. An account's is wide enough that a client within its tier's own limits never
 * meets it (its completions and completion reads, retries and other endpoints included), and its
 * bytes hold two of the largest valid chat request (60.8 MiB); the paid tier's follows
 * PAID_REQUESTS_PER_MINUTE unless set.
 */
function abuseBudgets(r: Reader): Config['limits']['abuseBudget'] {
  const paidPerMinute = r.int('PAID_REQUESTS_PER_MINUTE', 600, 1, 10_000_000);
  const paidBudget = r.int('ABUSE_BUDGET_PAID_REQUESTS_PER_MINUTE', 5 * paidPerMinute, 1, 100_000_000);
  if (paidBudget < paidPerMinute)
    throw new ConfigError(
      'ABUSE_BUDGET_PAID_REQUESTS_PER_MINUTE',
      `at least PAID_REQUESTS_PER_MINUTE (${paidPerMinute})`,
      r.raw('ABUSE_BUDGET_PAID_REQUESTS_PER_MINUTE'),
    );
  const bytes = (name: string, fallback: number, min: number) => r.int(name, fallback, min, 1024 * 1024 * MIB);
  return {
    free: {
      requestsPerMinute: r.int('ABUSE_BUDGET_FREE_REQUESTS_PER_MINUTE', 600, 20, 100_000_000),
      bytesPerMinute: bytes('ABUSE_BUDGET_FREE_BYTES_PER_MINUTE', 128 * MIB, 64 * MIB),
    },
    paid: {
      requestsPerMinute: paidBudget,
      bytesPerMinute: bytes('ABUSE_BUDGET_PAID_BYTES_PER_MINUTE', 1024 * MIB, 64 * MIB),
    },
    client: {
      requestsPerMinute: r.int('ABUSE_BUDGET_CLIENT_REQUESTS_PER_MINUTE', 600, 1, 100_000_000),
      bytesPerMinute: bytes('ABUSE_BUDGET_CLIENT_BYTES_PER_MINUTE', 16 * MIB, MIB),
    },
  };
}

function stripeMaxOps(r: Reader): number {
  const live = r.optional('STRIPE_SECRET_KEY')?.startsWith('sk_live_') ?? false;
  return r.int('STRIPE_MAX_OPS_PER_SECOND', live ? 80 : 20, 1, 10_000);
}
