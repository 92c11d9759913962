import { pino, type Logger } from 'pino';
import type { Config } from './config.js';

export type { Logger };

/** `traceFields` gives the ids of the span active where a line is written (infra/tracing.ts's traceLogFields). */
export function createLogger(config: Config, role: string, traceFields?: () => object): Logger {
  return pino({
    level: config.log.level,
    base: { role, pid: process.pid },
    redact: {
      paths: ['req.headers.authorization', 'headers.authorization', '*.api_key', '*.token'],
      censor: '[redacted]',
    },
    // With tracing on, a line written inside a sampled span carries its traceId (and spanId).
    ...(config.tracing.enabled && traceFields ? { mixin: traceFields } : {}),
  });
}
