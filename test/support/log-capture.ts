import { Writable } from 'node:stream';
import { pino } from 'pino';
import type { Logger } from '../../src/logger.js';

export interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

/** A real pino logger whose lines a test can read back, parsed. */
export function captureLogs(level = 'info'): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n')) if (line.trim()) lines.push(JSON.parse(line) as LogLine);
      done();
    },
  });
  return { logger: pino({ level }, sink), lines };
}
