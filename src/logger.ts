import { pino, type Logger } from 'pino';
import type { Config } from './config.js';
import { traceLogFields } from './infra/tracing.js';

export type { Logger };

export function createLogger(config: Config, role: string): Logger {
  return pino({
    level: config.log.level,
    base: { role, pid: process.pid },
    redact: {
      paths: ['req.headers.authorization', 'headers.authorization', '*.api_key', '*.token'],
      censor: '[redacted]',
    },
    // With tracing on, a line written inside a sampled span carries its traceId (and spanId).
    ...(config.tracing.enabled ? { mixin: traceLogFields } : {}),
  });
}
