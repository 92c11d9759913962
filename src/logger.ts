import { pino, type Logger } from 'pino';
import type { Config } from './config.js';

export type { Logger };

export function createLogger(config: Config, role: string): Logger {
  return pino({
    level: config.log.level,
    base: { role, pid: process.pid },
    redact: { paths: ['req.headers.authorization', 'headers.authorization', '*.api_key', '*.token'], censor: '[redacted]' },
  });
}
