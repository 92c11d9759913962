import { expect } from 'chai';
import { ConfigError, invoicingSlots, loadConfig } from '../../src/config.js';

describe('configuration', () => {
  const base = { DATABASE_URL: 'postgres://u@localhost:5432/db', REDIS_URL: 'redis://127.0.0.1:6379' };

  it('applies the documented defaults when nothing is set', () => {
    const c = loadConfig({});
    expect(c.http.port).to.equal(8080);
    expect(c.env).to.equal('development');
    expect(c.mail.transport).to.equal('dev-outbox');
    expect(c.providers.backend).to.equal('local');
  });

  it('names the variable and what it expects when a value is wrong', () => {
    expect(() => loadConfig({ ...base, PORT: 'eighty' })).to.throw(
      ConfigError,
      /^PORT must be an integer from 0 to 65535 \(got "eighty"\)$/,
    );
    expect(() => loadConfig({ ...base, REDIS_URL: 'http://x' })).to.throw(
      ConfigError,
      /^REDIS_URL must be a URL \(redis or rediss\)/,
    );
    expect(() => loadConfig({ ...base, MAIL_TRANSPORT: 'smtp' })).to.throw(
      ConfigError,
      /^MAIL_TRANSPORT must be one of dev-outbox, postmark/,
    );
  });

  it('requires the production-only variables in production', () => {
    expect(() => loadConfig({ NODE_ENV: 'production' })).to.throw(
      ConfigError,
      /^DATABASE_URL must be set in production/,
    );
    expect(() => loadConfig({ NODE_ENV: 'production', ...base })).to.throw(
      ConfigError,
      /^JWT_SECRET must be set in production/,
    );
  });

  it('serves catalog models from their providers as soon as one provider key is set', () => {
    expect(loadConfig({ ...base, OPENAI_API_KEY: 'sk-x' }).providers.backend).to.equal('catalog');
  });

  it('is frozen, so no code can change it after start-up', () => {
    const c = loadConfig(base);
    expect(Object.isFrozen(c.http)).to.equal(true);
  });

  it('takes CORS origins exactly as browsers send them, and refuses anything else', () => {
    expect(
      loadConfig({ ...base, CORS_ORIGINS: 'https://app.example.com, http://localhost:5173' }).http.corsOrigins,
    ).to.deep.equal(['https://app.example.com', 'http://localhost:5173']);
    for (const bad of ['https://app.example.com/', 'app.example.com', 'https://app.example.com/path', '*']) {
      expect(() => loadConfig({ ...base, CORS_ORIGINS: bad }), bad).to.throw(
        ConfigError,
        /^CORS_ORIGINS must be a comma-separated list of origins/,
      );
    }
  });

  it('refuses a request timeout shorter than the headers timeout', () => {
    expect(() => loadConfig({ ...base, HTTP_HEADERS_TIMEOUT_MS: '30000', HTTP_REQUEST_TIMEOUT_MS: '20000' })).to.throw(
      ConfigError,
      /^HTTP_REQUEST_TIMEOUT_MS must be at least HTTP_HEADERS_TIMEOUT_MS/,
    );
  });
  it("sets a paid account's abuse budget to 5 x PAID_REQUESTS_PER_MINUTE unless given, and refuses one below that tier's limit", () => {
    expect(loadConfig(base).limits.abuseBudget.paid.requestsPerMinute).to.equal(3000);
    expect(
      loadConfig({ ...base, PAID_REQUESTS_PER_MINUTE: '2000' }).limits.abuseBudget.paid.requestsPerMinute,
    ).to.equal(10_000);
    expect(() =>
      loadConfig({ ...base, PAID_REQUESTS_PER_MINUTE: '2000', ABUSE_BUDGET_PAID_REQUESTS_PER_MINUTE: '1000' }),
    ).to.throw(
      ConfigError,
      /^ABUSE_BUDGET_PAID_REQUESTS_PER_MINUTE must be at least PAID_REQUESTS_PER_MINUTE \(2000\)/,
    );
  });
  it('bounds each process to DB_POOL_SIZE connections for queries and DB_LOCK_POOL_SIZE for locks, 10 and INVOICING_CONCURRENCY + 2 by default', () => {
    expect(loadConfig(base).db).to.include({ poolSize: 10, lockPoolSize: 10 });
    expect(loadConfig({ ...base, INVOICING_CONCURRENCY: '3' }).db).to.include({ lockPoolSize: 5 });
    expect(loadConfig({ ...base, DB_POOL_SIZE: '4', DB_LOCK_POOL_SIZE: '3' }).db).to.include({
      poolSize: 4,
      lockPoolSize: 3,
    });
  });

  it('refuses a lock pool of one, since a scheduled run holds its claim and an account lock at once', () => {
    expect(() => loadConfig({ ...base, DB_LOCK_POOL_SIZE: '1' })).to.throw(
      ConfigError,
      /^DB_LOCK_POOL_SIZE must be an integer from 2 to 200 \(got "1"\)$/,
    );
  });

  it('lets a worker invoice only as many accounts at once as its lock pool holds beside a run claim', () => {
    expect(invoicingSlots(loadConfig(base))).to.equal(8);
    expect(invoicingSlots(loadConfig({ ...base, DB_LOCK_POOL_SIZE: '4' }))).to.equal(3);
    expect(invoicingSlots(loadConfig({ ...base, DB_LOCK_POOL_SIZE: '2', INVOICING_CONCURRENCY: '5' }))).to.equal(1);
  });

  it("paces Stripe under the mode's limit by default: 80 calls a second with a live key, 20 with a test key", () => {
    expect(loadConfig({ ...base, STRIPE_SECRET_KEY: 'sk_live_x' }).stripe.maxOpsPerSecond).to.equal(80);
    expect(loadConfig({ ...base, STRIPE_SECRET_KEY: 'sk_test_x' }).stripe.maxOpsPerSecond).to.equal(20);
    expect(loadConfig({ ...base, STRIPE_MAX_OPS_PER_SECOND: '95' }).stripe.maxOpsPerSecond).to.equal(95);
  });

  it('takes DB_STATEMENT_TIMEOUT_MS=0 as leaving the statement timeout to the server, for transaction-mode poolers', () => {
    expect(loadConfig(base).db.statementTimeoutMs).to.equal(10_000);
    expect(loadConfig({ ...base, DB_STATEMENT_TIMEOUT_MS: '0' }).db.statementTimeoutMs).to.equal(0);
    for (const bad of ['50', '-1', 'off', '600001']) {
      expect(() => loadConfig({ ...base, DB_STATEMENT_TIMEOUT_MS: bad }), bad).to.throw(
        ConfigError,
        /^DB_STATEMENT_TIMEOUT_MS must be an integer from 100 to 600000, or 0 to leave it to the server/,
      );
    }
  });

  it('leaves the queue dashboard off, and read-only once on, unless told otherwise', () => {
    expect(loadConfig(base).admin).to.deep.equal({ token: undefined, queuesWritable: false });
    const token = 'a'.repeat(32);
    expect(loadConfig({ ...base, ADMIN_TOKEN: token, ADMIN_QUEUES_WRITABLE: 'true' }).admin).to.deep.equal({
      token,
      queuesWritable: true,
    });
  });

  it('refuses an ADMIN_TOKEN that is short or holds spaces, without printing it', () => {
    for (const bad of ['a'.repeat(31), `${'a'.repeat(20)} ${'a'.repeat(20)}`]) {
      expect(() => loadConfig({ ...base, ADMIN_TOKEN: bad }), bad).to.throw(
        ConfigError,
        /^ADMIN_TOKEN must be at least 32 printable ASCII characters without spaces \(got "<hidden>"\)$/,
      );
    }
  });

  it('turns tracing on only with an OTLP endpoint, sending to <endpoint>/v1/traces or the traces endpoint as given', () => {
    expect(loadConfig(base).tracing).to.include({ enabled: false, endpoint: undefined });
    expect(loadConfig({ ...base, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).tracing).to.include({
      enabled: true,
      endpoint: 'http://collector:4318/v1/traces',
    });
    const both = {
      ...base,
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example.com/otlp/v1/traces',
    };
    expect(loadConfig(both).tracing).to.include({
      enabled: true,
      endpoint: 'https://traces.example.com/otlp/v1/traces',
    });
    expect(loadConfig({ ...both, OTEL_SDK_DISABLED: 'true' }).tracing.enabled).to.equal(false);
  });

  it('samples every trace by default, or the ratio OTEL_TRACES_SAMPLER_ARG of them, and refuses samplers it does not know', () => {
    expect(loadConfig(base).tracing).to.include({ sampler: 'parentbased_always_on', samplerRatio: 1 });
    expect(
      loadConfig({ ...base, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.05' }).tracing,
    ).to.include({ sampler: 'parentbased_traceidratio', samplerRatio: 0.05 });
    expect(() => loadConfig({ ...base, OTEL_TRACES_SAMPLER: 'jaeger_remote' })).to.throw(
      ConfigError,
      /^OTEL_TRACES_SAMPLER must be one of always_on, always_off, traceidratio/,
    );
    for (const bad of ['1.5', '-0.1', 'half']) {
      expect(() => loadConfig({ ...base, OTEL_TRACES_SAMPLER_ARG: bad }), bad).to.throw(
        ConfigError,
        /^OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1/,
      );
    }
  });
});
